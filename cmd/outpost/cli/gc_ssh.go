package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost/internal/plural"
	sshp "github.com/outposthq/outpost/providers/ssh"
)

// gcSSH is `outpost gc --sandbox ssh`: the leases dead owners left on an
// SSH host. A configuration failure (host key, key) keeps its code.
func (a *app) gcSSH(c *cobra.Command, settings map[string]string, all, dryRun, asJSON bool) error {
	return collect(a, "ssh", settings, asJSON, func(p *sshp.Provider) (sshp.GCReport, error) {
		return p.GC(c.Context(), sshp.GCOptions{All: all, DryRun: dryRun})
	}, func(rep sshp.GCReport) {
		verb := gcVerb("remove", dryRun)
		if len(rep.Leases) > 0 {
			tw := newTable(a.stdout, "LEASE", "OWNER", "STATE", "CREATED", "RESULT")
			for _, l := range rep.Leases {
				tw.row(l.Lease, ownerText(l.Owner), string(l.Liveness), localTime(l.Created), gcResult(verb, l.Error))
			}
			tw.flush()
		}
		fmt.Fprintf(a.stdout, "%s %s on %s; kept %d of live or unknown owners\n", verb, plural.N(len(rep.Leases), "lease"), rep.Host, rep.Kept)
	})
}
