package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// GCOptions configure GC.
type GCOptions struct {
	// All removes every lease on the host, whatever its owner's state
	// (use when owners on other machines are known to be gone).
	All bool
	// DryRun lists what would be removed without removing it.
	DryRun bool
}

// Collected is one lease GC found.
type Collected struct {
	Lease    string         `json:"lease"`
	Dir      string         `json:"dir"`
	Owner    owner.Owner    `json:"owner"`
	Liveness owner.Liveness `json:"liveness"`
	Created  time.Time      `json:"created,omitzero"`
	Version  string         `json:"version,omitempty"`
	Removed  bool           `json:"removed"`
	Error    string         `json:"error,omitempty"`
}

// GCReport is what GC did.
type GCReport struct {
	Host   string      `json:"host"`
	Leases []Collected `json:"leases"`
	// Kept counts leases left alone (owner alive or unknown).
	Kept int `json:"kept"`
}

// orphanAge is how old a lease directory without an owner record must be
// to be swept (one being made right now has none yet).
const orphanAge = time.Minute

// GC removes the leases on the host whose owner process is dead: it
// kills their process groups (the exec shims whose run directory is
// theirs) and removes their directories. It is what `outpost gc --sandbox
// ssh` runs, and what the first Open of every provider does (without All).
func (p *Provider) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	c, err := p.connect(ctx)
	if err != nil {
		return GCReport{}, err
	}
	return p.gc(ctx, c, opts)
}

func (p *Provider) sweepOnce(ctx context.Context, c *conn) {
	p.mu.Lock()
	due := !p.swept
	p.swept = true
	p.mu.Unlock()
	if due {
		_, _ = p.gc(ctx, c, GCOptions{})
	}
}

func (p *Provider) gc(ctx context.Context, c *conn, opts GCOptions) (GCReport, error) {
	rep := GCReport{Host: p.Address()}
	leases := path.Join(c.remote.root, "leases")
	list := fmt.Sprintf(`now=$(date +%%s)
for d in %s/%s*; do
	[ -d "$d" ] || continue
	printf '%%s\t%%s\t' "${d##*/}" $(( now - $(stat -c %%Y "$d") ))
	tr -d '\n' <"$d/owner" 2>/dev/null
	echo
done`, shq(leases), leasePrefix)
	res, err := run(ctx, c, list, nil)
	if err != nil {
		return rep, fmt.Errorf("ssh: listing the leases on %s: %w", p.Address(), err)
	}
	var doomed []string
	for _, line := range strings.Split(string(res.stdout), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || !strings.HasPrefix(f[0], leasePrefix) || strings.ContainsAny(f[0], "/'") {
			continue
		}
		col := Collected{Lease: f[0], Dir: path.Join(leases, f[0]), Liveness: owner.Unknown}
		var rec Record
		if err := json.Unmarshal([]byte(f[2]), &rec); err == nil {
			col.Owner, col.Created, col.Version = rec.Owner, rec.Created, rec.Version
			col.Liveness = rec.Owner.Liveness()
		} else if age, _ := strconv.Atoi(f[1]); age > int(orphanAge.Seconds()) {
			col.Liveness = owner.Dead // never finished being made
		}
		if col.Owner.PID == owner.Self().PID && col.Owner.Start == owner.Self().Start && col.Owner.Boot == owner.Self().Boot {
			col.Liveness = owner.Alive
		}
		if !opts.All && col.Liveness != owner.Dead {
			rep.Kept++
			continue
		}
		rep.Leases = append(rep.Leases, col)
		doomed = append(doomed, col.Dir)
	}
	if opts.DryRun || len(doomed) == 0 {
		return rep, nil
	}
	var b strings.Builder
	for _, d := range doomed {
		fmt.Fprintf(&b, "%s >/dev/null 2>&1\n%s && echo ok %s || echo fail %s\n", command(shim.ReapArgs(c.remote.binary, path.Join(d, "run"))...), removeCmd(d), shq(path.Base(d)), shq(path.Base(d)))
	}
	res, err = run(ctx, c, b.String(), nil)
	if err != nil {
		return rep, fmt.Errorf("ssh: removing orphaned leases on %s: %w", p.Address(), err)
	}
	done := map[string]bool{}
	for _, line := range strings.Split(string(res.stdout), "\n") {
		if id, ok := strings.CutPrefix(line, "ok "); ok {
			done[id] = true
		}
	}
	var errs []error
	for i := range rep.Leases {
		if done[rep.Leases[i].Lease] {
			rep.Leases[i].Removed = true
		} else {
			rep.Leases[i].Error = "not removed: " + strings.TrimSpace(string(res.stderr))
			errs = append(errs, fmt.Errorf("ssh: removing %s on %s: %s", rep.Leases[i].Dir, p.Address(), strings.TrimSpace(string(res.stderr))))
		}
	}
	sort.Slice(rep.Leases, func(i, j int) bool { return rep.Leases[i].Created.Before(rep.Leases[j].Created) })
	return rep, errors.Join(errs...)
}

// Collect implements driver.Collector: GC, its report also in the
// portable form `outpost gc` prints.
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	rep, err := p.GC(ctx, GCOptions{All: opts.All, DryRun: opts.DryRun})
	col := driver.Collection{Where: p.Address(), Kept: rep.Kept, Report: rep}
	for _, l := range rep.Leases {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "lease", Name: l.Dir, Owner: l.Owner.String(), State: string(l.Liveness),
			Created: l.Created, Removed: l.Removed, Error: l.Error})
	}
	return col, err
}
