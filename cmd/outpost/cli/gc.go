package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/internal/plural"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/sandbox/driver"
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
			return collect(a, "docker", settings, asJSON, func(p *docker.Provider) (docker.GCReport, error) {
				return p.GC(c.Context(), docker.GCOptions{All: all, DryRun: dryRun})
			}, func(rep docker.GCReport) { a.printGC(rep, dryRun) })
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

// collect opens provider name (of outpost's type P), runs its garbage
// collection and prints the report: as one JSON object, else with human.
// A failure keeps its code, else is a sandbox error.
func collect[P driver.Provider, R any](a *app, name string, settings map[string]string, asJSON bool, gc func(P) (R, error), human func(R)) error {
	p, err := openProvider(name, settings)
	if err != nil {
		return err
	}
	defer p.Close()
	pp, ok := p.(P)
	if !ok {
		return outpost.Errorf(outpost.Configuration, "gc", "the %s provider is not outpost's", name)
	}
	rep, gcErr := gc(pp)
	if asJSON {
		if err := writeJSONLines(a.stdout, []R{rep}); err != nil {
			return err
		}
	} else {
		human(rep)
	}
	if gcErr != nil {
		return outpost.Wrap(outpost.Sandbox, "gc", gcErr)
	}
	return nil
}

// gcVerb is what gc did, or would do with --dry-run.
func gcVerb(verb string, dryRun bool) string {
	if dryRun {
		return "would " + verb
	}
	return verb + "d"
}

// gcResult is a row's result: the verb, or its failure.
func gcResult(verb, failure string) string {
	if failure != "" {
		return "failed: " + failure
	}
	return verb
}

// ownerText names a lease's owner process.
func ownerText(o owner.Owner) string {
	s := "pid " + strconv.Itoa(o.PID)
	if o.Host != "" {
		s += " on " + o.Host
	}
	return s
}

// localTime is t in the local time zone, "" for the zero time.
func localTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format(time.DateTime)
}

func (a *app) printGC(rep docker.GCReport, dryRun bool) {
	verb := gcVerb("remove", dryRun)
	if len(rep.Containers) > 0 {
		tw := newTable(a.stdout, "LEASE", "CONTAINER", "OWNER", "STATE", "CREATED", "RESULT")
		for _, c := range rep.Containers {
			res := gcResult(verb, c.Error)
			if c.Error == "" && !c.Removed && !dryRun {
				res = "kept"
			}
			tw.row(c.Lease, c.Container[:min(12, len(c.Container))], ownerText(c.Owner), string(c.Liveness), localTime(c.Created), res)
		}
		tw.flush()
	}
	fmt.Fprintf(a.stdout, "%s %s and %s; kept %d of live or unknown owners\n", verb, plural.N(len(rep.Containers), "container"), plural.N(len(rep.Volumes), "volume"), rep.Kept)
}

// gcKubernetes is `outpost gc --sandbox kubernetes`.
func (a *app) gcKubernetes(c *cobra.Command, settings map[string]string, all, dryRun, asJSON bool) error {
	return collect(a, "kubernetes", settings, asJSON, func(p *kubernetes.Provider) (kubernetes.GCReport, error) {
		return p.GC(c.Context(), kubernetes.GCOptions{All: all, DryRun: dryRun})
	}, func(rep kubernetes.GCReport) {
		verb := gcVerb("delete", dryRun)
		if len(rep.Leases) > 0 {
			tw := newTable(a.stdout, "LEASE", "HOLDER", "RENEWED", "PODS", "RESULT")
			for _, l := range rep.Leases {
				tw.row(l.Lease, l.Holder, localTime(l.RenewedAt), strconv.Itoa(len(l.Pods)), gcResult(verb, l.Error))
			}
			tw.flush()
		}
		fmt.Fprintf(a.stdout, "%s %s (their pods go with them) and %s in namespace %s; kept %s\n", verb,
			plural.N(len(rep.Leases), "expired owner Lease"), plural.N(len(rep.Pods), "ended pod"), rep.Namespace, plural.N(rep.Kept, "renewed Lease"))
	})
}
