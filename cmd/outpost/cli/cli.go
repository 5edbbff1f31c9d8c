// Package cli is the outpost command line: Run holds the verbs and no
// logic a library user would need. It writes only to the writers it is
// given.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/server"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/sandbox"

	_ "github.com/outposthq/outpost/providers/docker" // registers "docker"
	_ "github.com/outposthq/outpost/providers/local"  // registers "local"
	_ "github.com/outposthq/outpost/providers/ssh"    // registers "ssh"
	// providers/kubernetes is imported by kubernetes.go, which a build
	// with -tags nokubernetes leaves out (kubernetes_off.go).
)

// Version is set at build time with -ldflags "-X .../cmd/outpost/cli.Version=v1.2.3".
var Version = ""

// usageError marks errors of the command line itself (exit status 2).
type usageError struct{ error }

// Run runs the outpost command with args (without the program name) and
// returns its exit status (docs/errors.md).
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &app{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	root := app.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	for _, c := range app.closers {
		c()
	}
	if err == nil {
		return app.exit
	}
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) {
		fmt.Fprintln(stderr, "outpost:", strings.TrimRight(err.Error(), "\n"))
		return 2
	}
	if !app.reported {
		fmt.Fprintln(stderr, "outpost:", errText(err))
	}
	return outpost.ExitCode(err)
}

func isFlagError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.Contains(s, "flag needs an argument") ||
		strings.HasPrefix(s, "invalid argument") || strings.HasPrefix(s, "accepts ") || strings.HasPrefix(s, "requires at least") ||
		strings.HasPrefix(s, "if any flags in the group")
}

func errText(err error) string {
	var oe *outpost.Error
	if errors.As(err, &oe) {
		return oe.Error()
	}
	return err.Error()
}

type app struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	exit           int
	reported       bool // the error was already printed

	storeFlag string             // --store
	opened    conversation.Store // a.store()'s, once opened
	spool     *conversation.Spool
	// noAutoPush: opening the store does not push the spool (sync does).
	noAutoPush bool
	closers    []func()
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "outpost",
		Short:         "Run coding-agent CLIs as turns inside sandboxes",
		Long:          "outpost runs coding-agent CLIs (the built-in echo agent, Claude Code, Codex, ...) as turns inside sandboxes,\nwith one event stream, one error model, token usage and portable conversations.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentFlags().StringVar(&a.storeFlag, "store", "", "conversation store: a directory, or postgres://... for a store a fleet shares (default $"+storeEnv+", else the local directory store)")
	root.AddCommand(a.runCmd(), a.diffCmd(), a.applyCmd(), a.branchCmd(), a.raceCmd(), a.conversationsCmd(), a.usageCmd(), a.agentsCmd(), a.doctorCmd(), a.versionCmd(), echoAgentCmd(), a.gcCmd(), a.bootstrapCmd(), a.serveCmd(), a.mcpCmd(), a.acpCmd(), a.kubernetesCmd())
	root.InitDefaultCompletionCmd() // before mistypes, which covers it too
	mistypes(root)
	return root
}

func echoAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:                echo.Subcommand,
		Short:              "Run the built-in echo agent (used by the echo preset)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			code := echo.Main(args, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
			if code != 0 {
				return exitStatus(code)
			}
			return nil
		},
	}
}

// exitStatus is an error that carries a literal exit status.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print outpost's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(a.stdout, "outpost", version())
			return nil
		},
	}
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
		if v != "" && v != "(devel)" {
			return v
		}
	}
	return "devel"
}

func (a *app) agentsCmd() *cobra.Command {
	var asJSON bool
	var sandboxes, set []string
	c := &cobra.Command{
		Use:   "agents",
		Short: "List the agent presets, built in and from the agents directory, with their pinned versions, and the sandboxes' isolation",
		Long: `List the agent presets: the built-in ones, then the preset files of the agents
directory ($XDG_CONFIG_HOME/outpost/agents). VERSION is the pinned version of
the preset's CLI; INSTALLED says whether a turn would run it without a
download (on the PATH, or unpacked in the bootstrap cache); KEYLESS whether
its API keys can stay out of the sandbox (docs/security.md). The HTTP API's
GET /v1/agents and MCP's list_agents list the same fields (without files:
a server runs built-in presets).

Then the sandboxes (--sandbox, default local): ISOLATION is how their
leases' processes are kept from the host's as they would run now (local:
namespaces where bubblewrap works, else none), EGRESS whether egress
gateway is enforced, NOTE why a lease runs less isolated than asked.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			sbs, err := listSandboxes(sandboxes, set)
			if err != nil {
				return err
			}
			rows := server.Agents(&server.AgentsOptions{Dir: declarative.Dir(nil)})
			if asJSON {
				if err := writeJSONLines(a.stdout, rows); err != nil {
					return err
				}
				return writeJSONLines(a.stdout, sbs)
			}
			if err := a.printAgents(rows); err != nil {
				return err
			}
			return a.printSandboxes(sbs)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line: the agents, then the sandboxes (objects with \"sandbox\")")
	c.Flags().StringArrayVar(&sandboxes, "sandbox", nil, "a sandbox provider whose isolation to show; repeatable (default local)")
	c.Flags().StringArrayVar(&set, "set", nil, "provider setting PROVIDER.KEY=VALUE, e.g. local.isolation=none; repeatable")
	return c
}

// printAgents prints the agents' table, and on standard error why the
// preset files that do not load do not.
func (a *app) printAgents(rows []server.Agent) error {
	tw := newTable(a.stdout, "AGENT", "VERSION", "SOURCE", "INSTALLED", "RESUME", "FORK", "LIVE INPUT", "KEYLESS", "BOOTSTRAP")
	for _, r := range rows {
		if r.Error != "" {
			tw.row(r.Name, "-", r.Source, "-", "-", "-", "-", "-", "-")
			continue
		}
		tw.row(r.Name, r.Version, r.Source, yes(r.Installed), yes(r.Resumable), yes(r.Forkable), yes(r.Live), r.Keyless, r.Bootstrap)
	}
	if err := tw.flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(a.stderr, "outpost: agent %s (%s) does not load: %s\n", r.Name, r.File, r.Error)
		}
	}
	return nil
}

// listSandboxes opens each named provider (default local) with its
// settings of --set PROVIDER.KEY=VALUE and says how its leases are
// isolated (server.SandboxOf); one that does not open is listed with its
// error.
func listSandboxes(names, set []string) ([]server.Sandbox, error) {
	settings, err := providerSettings(set)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		names = []string{"local"}
	}
	out := make([]server.Sandbox, 0, len(names))
	for _, n := range names {
		p, err := openProvider(n, settings[n])
		out = append(out, server.SandboxOf(n, p, err))
		if err == nil {
			p.Close()
		}
	}
	return out, nil
}

// printSandboxes prints the sandboxes' table after the agents'.
func (a *app) printSandboxes(sbs []server.Sandbox) error {
	fmt.Fprintln(a.stdout)
	tw := newTable(a.stdout, "SANDBOX", "ISOLATION", "EGRESS", "NOTE")
	for _, s := range sbs {
		note := s.Note
		if s.Error != "" {
			note = s.Error
		}
		tw.row(s.Name, orDefault(s.Isolation, "-"), s.Egress, orDefault(note, "-"))
	}
	return tw.flush()
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeJSONLines[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func openProvider(name string, settings map[string]string) (driver.Provider, error) {
	return sandbox.Open(name, settings)
}
