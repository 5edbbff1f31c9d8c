package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/plural"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/kubernetes"
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
With --sandbox kubernetes, delete the owner Leases of outpost processes
that stopped renewing them (on any machine): the cluster's garbage
collector then deletes their pods. Outpost pods that ended go too, and
--all deletes every outpost Lease and pod of the namespace.

Every outpost process also does this on its first docker lease; gc is for
doing it now, or for everything (--all) when owners on other machines are
known to be gone. Local sandboxes' homes are swept by the next local lease.
Containers of live owners, and of owners outpost cannot judge (another
machine or pid namespace), are kept unless --all.`,
		Example: `  outpost gc
  outpost gc --dry-run --json
  outpost gc --all --set host=tcp://build-box:2375
  outpost gc --sandbox ssh --set host=agent@build-box
  outpost gc --sandbox kubernetes --set namespace=agents`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			settings, err := parsePairs(set, "--set", nil)
			if err != nil {
				return err
			}
			switch kind {
			case "ssh":
				return a.gcSSH(c, settings, all, dryRun, asJSON)
			case "kubernetes":
				return a.gcKubernetes(c, settings, all, dryRun, asJSON)
			case "docker":
			default:
				return outpost.Errorf(outpost.Configuration, "gc", "gc knows the docker, ssh and kubernetes sandboxes, not %q", kind)
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
	fl.StringVar(&kind, "sandbox", "docker", "the sandbox provider to collect: docker, ssh or kubernetes")
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
	fmt.Fprintf(a.stdout, "%s %s and %s; kept %d of live or unknown owners\n", verb, plural.N(len(rep.Containers), "container"), plural.N(len(rep.Volumes), "volume"), rep.Kept)
}

// gcKubernetes is `outpost gc --sandbox kubernetes`.
func (a *app) gcKubernetes(c *cobra.Command, settings map[string]string, all, dryRun, asJSON bool) error {
	p, err := openProvider("kubernetes", settings)
	if err != nil {
		return err
	}
	kp, ok := p.(*kubernetes.Provider)
	if !ok {
		return outpost.Errorf(outpost.Configuration, "gc", "the kubernetes provider is not outpost's")
	}
	defer kp.Close()
	rep, gcErr := kp.GC(c.Context(), kubernetes.GCOptions{All: all, DryRun: dryRun})
	if asJSON {
		if err := writeJSONLines(a.stdout, []kubernetes.GCReport{rep}); err != nil {
			return err
		}
	} else {
		verb := "deleted"
		if dryRun {
			verb = "would delete"
		}
		if len(rep.Leases) > 0 {
			tw := newTable(a.stdout, "LEASE", "HOLDER", "RENEWED", "PODS", "RESULT")
			for _, l := range rep.Leases {
				res := verb
				if l.Error != "" {
					res = "failed: " + l.Error
				}
				renewed := ""
				if !l.RenewedAt.IsZero() {
					renewed = l.RenewedAt.Local().Format(time.DateTime)
				}
				tw.row(l.Lease, l.Holder, renewed, strconv.Itoa(len(l.Pods)), res)
			}
			tw.flush()
		}
		fmt.Fprintf(a.stdout, "%s %d expired owner Lease(s) (their pods go with them) and %d ended pod(s) in namespace %s; kept %d renewed Lease(s)\n", verb, len(rep.Leases), len(rep.Pods), rep.Namespace, rep.Kept)
	}
	if gcErr != nil {
		return outpost.Wrap(outpost.Sandbox, "gc", gcErr)
	}
	return nil
}
