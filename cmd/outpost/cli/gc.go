package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost/internal/plural"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// gcCmd is `outpost gc`: remove the sandboxes of outpost processes that
// died without releasing them (SIGKILL, a crash, a reboot), through the
// provider's driver.Collector.
func (a *app) gcCmd() *cobra.Command {
	var all, dryRun, asJSON bool
	var set []string
	var kind string
	c := &cobra.Command{
		Use:   "gc",
		Short: "Remove sandboxes left behind by outpost processes that died",
		Long: `Remove the Docker containers (and their volumes) of leases whose owner
process is gone: killed, crashed, or on a machine that rebooted since.
With --sandbox ssh, remove the lease directories (and kill the process
groups) such owners left on the SSH host named by --set host=...
With --sandbox kubernetes, delete the owner Leases of outpost processes
that stopped renewing them (on any machine): the cluster's garbage
collector then deletes their pods. Outpost pods that ended go too, and
--all deletes every outpost Lease and pod of the namespace.
With --sandbox local, remove the private homes of dead local leases.

Every outpost process also does this on its first lease; gc is for
doing it now, or for everything (--all) when owners on other machines are
known to be gone. Containers of live owners, and of owners outpost cannot
judge (another machine or pid namespace), are kept unless --all. A
provider that cannot collect (memory) says so.`,
		Example: `  outpost gc
  outpost gc --dry-run --json
  outpost gc --all --set host=tcp://build-box:2375
  outpost gc --sandbox ssh --set host=agent@build-box
  outpost gc --sandbox kubernetes --set namespace=agents
  outpost gc --sandbox local`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			settings, err := parsePairs(set, "--set", nil)
			if err != nil {
				return err
			}
			p, err := openProvider(kind, settings)
			if err != nil {
				return err
			}
			defer p.Close()
			col, gcErr := sandbox.Collect(c.Context(), p, driver.CollectOptions{All: all, DryRun: dryRun})
			if gcErr != nil && col.Where == "" && len(col.Orphans) == 0 {
				return gcErr // nothing was swept: only the error to say
			}
			if err := a.printGC(col, dryRun, asJSON); err != nil {
				return err
			}
			return gcErr
		},
	}
	fl := c.Flags()
	fl.BoolVar(&all, "all", false, "remove every outpost sandbox of the provider, whatever its owner's state")
	fl.BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	fl.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	fl.StringArrayVar(&set, "set", nil, "provider setting KEY=VALUE (e.g. host=...); repeatable")
	fl.StringVar(&kind, "sandbox", "docker", "the sandbox provider to collect: docker, ssh, kubernetes or local")
	return c
}

// printGC writes what a collection found: the provider's own report as
// JSON with --json, else a table and a summary.
func (a *app) printGC(col driver.Collection, dryRun, asJSON bool) error {
	if asJSON {
		var rep any = col
		if col.Report != nil {
			rep = col.Report
		}
		return writeJSONLines(a.stdout, []any{rep})
	}
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	if len(col.Orphans) > 0 {
		tw := newTable(a.stdout, "KIND", "NAME", "OWNER", "STATE", "CREATED", "RESULT")
		for _, o := range col.Orphans {
			res := verb
			if o.Error != "" {
				res = "failed: " + o.Error
			} else if !o.Removed && !dryRun {
				res = "kept"
			}
			created := ""
			if !o.Created.IsZero() {
				created = o.Created.Local().Format(time.DateTime)
			}
			tw.row(o.Kind, o.Name, o.Owner, o.State, created, res)
		}
		if err := tw.flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(a.stdout, "%s %s on %s; kept %d of live or unknown owners\n", verb, plural.N(len(col.Orphans), "orphan"), col.Where, col.Kept)
	return err
}
