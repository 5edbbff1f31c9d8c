package cli

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/plural"
	sshp "github.com/outposthq/outpost/providers/ssh"
)

// gcSSH is `outpost gc --sandbox ssh`: the leases dead owners left on an
// SSH host.
func (a *app) gcSSH(c *cobra.Command, settings map[string]string, all, dryRun, asJSON bool) error {
	p, err := openProvider("ssh", settings)
	if err != nil {
		return err
	}
	sp, ok := p.(*sshp.Provider)
	if !ok {
		return outpost.Errorf(outpost.Configuration, "gc", "the ssh provider is not outpost's")
	}
	defer sp.Close()
	rep, gcErr := sp.GC(c.Context(), sshp.GCOptions{All: all, DryRun: dryRun})
	if asJSON {
		if err := writeJSONLines(a.stdout, []sshp.GCReport{rep}); err != nil {
			return err
		}
	} else {
		verb := "removed"
		if dryRun {
			verb = "would remove"
		}
		if len(rep.Leases) > 0 {
			tw := newTable(a.stdout, "LEASE", "OWNER", "STATE", "CREATED", "RESULT")
			for _, l := range rep.Leases {
				res := verb
				if l.Error != "" {
					res = "failed: " + l.Error
				}
				created := ""
				if !l.Created.IsZero() {
					created = l.Created.Local().Format(time.DateTime)
				}
				owner := "pid " + strconv.Itoa(l.Owner.PID)
				if l.Owner.Host != "" {
					owner += " on " + l.Owner.Host
				}
				tw.row(l.Lease, owner, string(l.Liveness), created, res)
			}
			tw.flush()
		}
		fmt.Fprintf(a.stdout, "%s %s on %s; kept %d of live or unknown owners\n", verb, plural.N(len(rep.Leases), "lease"), rep.Host, rep.Kept)
	}
	if gcErr != nil {
		if errors.As(gcErr, new(*outpost.Error)) {
			return gcErr // a configuration error (host key, key) keeps its code
		}
		return outpost.Wrap(outpost.Sandbox, "gc", gcErr)
	}
	return nil
}
