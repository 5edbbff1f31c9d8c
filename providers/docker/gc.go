package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
)

// Labels on every container (and its volumes) the provider creates.
const (
	LabelPrefix = "com.github.outposthq.outpost."
	// LabelLease holds the lease id (also the container's name); its
	// presence marks a container as outpost's.
	LabelLease = LabelPrefix + "lease"
	// The owner process: pid, start time (clock ticks after boot, as in
	// /proc/PID/stat), the kernel's boot id, the pid namespace and the
	// host name. Together they tell whether the owner still runs.
	LabelOwnerPID   = LabelPrefix + "owner.pid"
	LabelOwnerStart = LabelPrefix + "owner.start"
	LabelOwnerBoot  = LabelPrefix + "owner.boot"
	LabelOwnerPidNS = LabelPrefix + "owner.pidns"
	LabelOwnerHost  = LabelPrefix + "owner.host"
	// LabelCreated is the creation time (RFC 3339, UTC).
	LabelCreated = LabelPrefix + "created"
	// LabelVersion is the outpost version that created the container.
	LabelVersion = LabelPrefix + "version"
	// LabelWorkspace is the workspace mode (copy, bind).
	LabelWorkspace = LabelPrefix + "workspace"
)

// Owner identifies a process on a machine.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start,omitempty"` // clock ticks after boot
	Boot  string `json:"boot,omitempty"`  // /proc/sys/kernel/random/boot_id
	PidNS string `json:"pidns,omitempty"` // readlink /proc/self/ns/pid
	Host  string `json:"host,omitempty"`
}

var self = sync.OnceValue(func() Owner {
	o := Owner{PID: os.Getpid(), Start: processStart(os.Getpid())}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		o.Boot = strings.TrimSpace(string(b))
	}
	o.PidNS, _ = os.Readlink("/proc/self/ns/pid")
	o.Host, _ = os.Hostname()
	return o
})

// Self is the current process as an owner.
func Self() Owner { return self() }

func (o Owner) labels() map[string]string {
	return map[string]string{
		LabelOwnerPID:   strconv.Itoa(o.PID),
		LabelOwnerStart: strconv.FormatUint(o.Start, 10),
		LabelOwnerBoot:  o.Boot,
		LabelOwnerPidNS: o.PidNS,
		LabelOwnerHost:  o.Host,
	}
}

func ownerOf(labels map[string]string) Owner {
	o := Owner{Boot: labels[LabelOwnerBoot], PidNS: labels[LabelOwnerPidNS], Host: labels[LabelOwnerHost]}
	o.PID, _ = strconv.Atoi(labels[LabelOwnerPID])
	o.Start, _ = strconv.ParseUint(labels[LabelOwnerStart], 10, 64)
	return o
}

// Liveness of an owner as seen from this process.
type Liveness string

const (
	Alive   Liveness = "alive"
	Dead    Liveness = "dead"
	Unknown Liveness = "unknown" // another machine or pid namespace
)

// Liveness tells whether o still runs. An owner in another pid namespace
// or on another machine is Unknown, except that an owner on this host
// name whose boot id differs is Dead (the machine rebooted since).
func (o Owner) Liveness() Liveness {
	me := self()
	if o.PID <= 0 {
		return Unknown
	}
	if o.Boot != "" && me.Boot != "" && o.Boot != me.Boot {
		if o.Host != "" && o.Host == me.Host {
			return Dead
		}
		return Unknown
	}
	if o.Boot == "" || o.PidNS == "" || o.PidNS != me.PidNS {
		return Unknown
	}
	if err := syscall.Kill(o.PID, 0); err != nil && errors.Is(err, syscall.ESRCH) {
		return Dead
	}
	if s := processStart(o.PID); o.Start != 0 && s != 0 && s != o.Start {
		return Dead // the pid was reused
	}
	if zombie(o.PID) {
		return Dead
	}
	return Alive
}

// processStart returns a process's start time in clock ticks after boot
// (field 22 of /proc/PID/stat), or 0 when unknown.
func processStart(pid int) uint64 {
	f := statFields(pid)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

func zombie(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// statFields returns the fields of /proc/PID/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// GCOptions configure GC.
type GCOptions struct {
	// All removes every outpost container, whatever its owner's state
	// (use when owners on other machines are known to be gone).
	All bool
	// DryRun lists what would be removed without removing it.
	DryRun bool
}

// Collected is one container GC found.
type Collected struct {
	Container string    `json:"container"` // engine id
	Lease     string    `json:"lease"`
	Owner     Owner     `json:"owner"`
	Liveness  Liveness  `json:"liveness"`
	Created   time.Time `json:"created,omitzero"`
	Version   string    `json:"version,omitempty"`
	Removed   bool      `json:"removed"`
	Error     string    `json:"error,omitempty"`
}

// GCReport is what GC did.
type GCReport struct {
	// Containers are the outpost containers whose owner is dead (or all
	// of them with GCOptions.All), removed unless DryRun.
	Containers []Collected `json:"containers"`
	// Kept counts outpost containers left alone (owner alive or unknown).
	Kept int `json:"kept"`
	// Volumes are dangling outpost volumes removed (left behind by a
	// container removed without its volumes).
	Volumes []string `json:"volumes,omitempty"`
}

// GC removes the containers (and their volumes) of leases whose owner
// process is dead, and dangling outpost volumes. It is what `outpost gc`
// runs, and what every provider does (without All) on its first Open and
// at most once a minute after. Errors removing one container are recorded
// in its entry and joined in the returned error; the sweep goes on.
func (p *Provider) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	eng, err := p.connect(ctx)
	if err != nil {
		return GCReport{}, err
	}
	return gc(ctx, eng, opts)
}

func gc(ctx context.Context, eng *engine, opts GCOptions) (GCReport, error) {
	var rep GCReport
	list, err := eng.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelLease))})
	if err != nil {
		return rep, fmt.Errorf("docker: listing outpost containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		o := ownerOf(c.Labels)
		lv := o.Liveness()
		if !opts.All && lv != Dead {
			rep.Kept++
			continue
		}
		col := Collected{Container: c.ID, Lease: c.Labels[LabelLease], Owner: o, Liveness: lv, Version: c.Labels[LabelVersion]}
		col.Created, _ = time.Parse(time.RFC3339Nano, c.Labels[LabelCreated])
		if !opts.DryRun {
			err := eng.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			switch {
			case err == nil || errdefs.IsNotFound(err):
				col.Removed = true
			case errdefs.IsConflict(err):
				// Removal already in progress (another sweep, the owner's
				// own Close): it will be gone.
				col.Removed = true
			default:
				col.Error = err.Error()
				errs = append(errs, fmt.Errorf("docker: removing %s (lease %s): %w", shortID(c.ID), col.Lease, err))
			}
		}
		rep.Containers = append(rep.Containers, col)
	}
	vols, err := eng.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelLease), filters.Arg("dangling", "true"))})
	if err != nil {
		errs = append(errs, fmt.Errorf("docker: listing outpost volumes: %w", err))
	} else {
		for _, v := range vols.Volumes {
			if opts.DryRun {
				rep.Volumes = append(rep.Volumes, v.Name)
				continue
			}
			if err := eng.cli.VolumeRemove(ctx, v.Name, false); err != nil && !errdefs.IsNotFound(err) {
				if !errdefs.IsConflict(err) { // in use again: not dangling any more
					errs = append(errs, fmt.Errorf("docker: removing volume %s: %w", v.Name, err))
				}
				continue
			}
			rep.Volumes = append(rep.Volumes, v.Name)
		}
	}
	sort.Slice(rep.Containers, func(i, j int) bool { return rep.Containers[i].Created.Before(rep.Containers[j].Created) })
	return rep, errors.Join(errs...)
}

// sweepInterval bounds how often a provider sweeps orphans on Open.
const sweepInterval = time.Minute

// sweep runs GC for dead owners, on the first Open and at most once per
// sweepInterval after. Failures are ignored: the sweep is a courtesy,
// `outpost gc` reports them.
func (p *Provider) sweep(ctx context.Context, eng *engine) {
	p.mu.Lock()
	due := !p.swept || time.Since(p.sweptAt) > sweepInterval
	if due {
		p.swept, p.sweptAt = true, time.Now()
	}
	p.mu.Unlock()
	if due {
		_, _ = gc(ctx, eng, GCOptions{})
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
