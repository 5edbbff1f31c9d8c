package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/providers/docker"
)

// gcCmd is `outpost gc`: remove the sandboxes of outpost processes that
// died without releasing them (SIGKILL, a crash, a reboot).
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

Every outpost process also does this on its first docker lease; gc is for
doing it now, or for everything (--all) when owners on other machines are
known to be gone. Local sandboxes' homes are swept by the next local lease.
Containers of live owners, and of owners outpost cannot judge (another
machine or pid namespace), are kept unless --all.`,
		Example: `  outpost gc
  outpost gc --dry-run --json
  outpost gc --all --set host=tcp://build-box:2375
  outpost gc --sandbox ssh --set host=agent@build-box`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			settings, err := parsePairs(set, "--set", nil)
			if err != nil {
				return err
			}
			if kind == "ssh" {
				return a.gcSSH(c, settings, all, dryRun, asJSON)
			}
			if kind != "docker" {
				return outpost.Errorf(outpost.Configuration, "gc", "gc knows the docker and ssh sandboxes, not %q", kind)
			}
			p, err := openProvider("docker", settings)
			if err != nil {
				return err
			}
			dp, ok := p.(*docker.Provider)
			if !ok {
				return outpost.Errorf(outpost.Configuration, "gc", "the docker provider is not outpost's")
			}
			defer dp.Close()
			rep, gcErr := dp.GC(c.Context(), docker.GCOptions{All: all, DryRun: dryRun})
			if asJSON {
				if err := writeJSONLines(a.stdout, []docker.GCReport{rep}); err != nil {
					return err
				}
			} else {
				a.printGC(rep, dryRun)
			}
			if gcErr != nil {
				return outpost.Wrap(outpost.Sandbox, "gc", gcErr)
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.BoolVar(&all, "all", false, "remove every outpost container, whatever its owner's state")
	fl.BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	fl.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	fl.StringArrayVar(&set, "set", nil, "provider setting KEY=VALUE (e.g. host=...); repeatable")
	fl.StringVar(&kind, "sandbox", "docker", "the sandbox provider to collect: docker or ssh")
	return c
}

func (a *app) printGC(rep docker.GCReport, dryRun bool) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	if len(rep.Containers) > 0 {
		tw := newTable(a.stdout, "LEASE", "CONTAINER", "OWNER", "STATE", "CREATED", "RESULT")
		for _, c := range rep.Containers {
			res := verb
			if c.Error != "" {
				res = "failed: " + c.Error
			} else if !c.Removed && !dryRun {
				res = "kept"
			}
			created := ""
			if !c.Created.IsZero() {
				created = c.Created.Local().Format(time.DateTime)
			}
			owner := "pid " + strconv.Itoa(c.Owner.PID)
			if c.Owner.Host != "" {
				owner += " on " + c.Owner.Host
			}
			tw.row(c.Lease, c.Container[:min(12, len(c.Container))], owner, string(c.Liveness), created, res)
		}
		tw.flush()
	}
	fmt.Fprintf(a.stdout, "%s %d container(s) and %d volume(s); kept %d of live or unknown owners\n", verb, len(rep.Containers), len(rep.Volumes), rep.Kept)
}
