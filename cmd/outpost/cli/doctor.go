package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/sandbox/driver"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/plural"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/server"
)

// Statuses of a doctor check (DoctorCheck.Status).
const (
	DoctorOK   = "ok"   // the check passed
	DoctorInfo = "info" // a fact that needs no action (a CLI the first turn downloads, no server running)
	DoctorWarn = "warn" // something is missing that only some uses need; the fix says what to do
	DoctorFail = "fail" // a check that matters failed: doctor exits non-zero
)

// DoctorCheck is one check of `outpost doctor`, and one line of its
// --json output before the result line.
type DoctorCheck struct {
	Type  string `json:"type"`  // "check"
	Check string `json:"check"` // store, serve, docker, bubblewrap, isolation (ssh), key, cli
	Agent string `json:"agent,omitempty"`
	// Status is DoctorOK, DoctorInfo, DoctorWarn or DoctorFail.
	Status  string `json:"status"`
	Message string `json:"message"`
	// Fix says what to do, for a check that is not ok; Code is the error
	// code of one that failed or warns (docs/errors.md).
	Fix  string `json:"fix,omitempty"`
	Code string `json:"code,omitempty"`
}

// DoctorResult is the last line of `outpost doctor --json`.
type DoctorResult struct {
	Type     string     `json:"type"` // "result"
	Failed   int        `json:"failed"`
	Warnings int        `json:"warnings"`
	ExitCode int        `json:"exit_code"`
	Error    *ErrorJSON `json:"error"`
}

type doctorFlags struct {
	agents   []string
	sandbox  string
	set      []string
	workdir  string
	json     bool
	dockerTO time.Duration
}

func (a *app) doctorCmd() *cobra.Command {
	var f doctorFlags
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check keys, agent CLIs, Docker, bubblewrap, the conversation store and the serve socket, each with its fix",
		Long: `Check what the first turns need, in one go, and say how to fix what fails:
the conversation store; the credentials of every agent preset (the check a
turn makes before anything else, for --sandbox: whether it takes host login
files) and whether its pinned CLI is installed; the Docker Engine; bubblewrap
on the PATH; the socket of outpost serve. Nothing is downloaded, started or
written, and no secret is printed: credentials are named, never shown.

Statuses: ok; info, a fact that needs no action; warn, something only some
uses need; fail, a check that matters. The checks that matter are the
store's, and those of what you name: the credentials of each --agent, the
Docker Engine with --sandbox docker. The exit status is 0 when none fails,
else that of the first failure's code (3 configuration, 5 sandbox, 7
conversation; docs/errors.md). --json prints one JSON object per check and
a result line last.`,
		Example: `  outpost doctor
  outpost doctor --agent claude --sandbox docker
  outpost doctor --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return a.doctor(c.Context(), f) },
	}
	fl := c.Flags()
	fl.StringArrayVar(&f.agents, "agent", nil, "an agent you will run (a preset name): its checks matter; repeatable")
	fl.StringVar(&f.sandbox, "sandbox", "local", "the sandbox the credentials are checked for (docker, ssh and kubernetes take host login files, local does not); docker: the engine matters")
	fl.StringArrayVar(&f.set, "set", nil, "sandbox provider setting KEY=VALUE (host=... for docker's engine); repeatable")
	fl.StringVar(&f.workdir, "workdir", "", "working directory whose .outpost/.env is read (default: the current one)")
	fl.BoolVar(&f.json, "json", false, "one JSON object per check, and a result line")
	fl.DurationVar(&f.dockerTO, "timeout", 5*time.Second, "how long the Docker Engine and the serve socket may take to answer")
	return c
}

func (a *app) doctor(ctx context.Context, f doctorFlags) error {
	a.noAutoPush = true // a check writes nothing
	settings, err := parsePairs(f.set, "--set", nil)
	if err != nil {
		return err
	}
	provider, err := openProvider(f.sandbox, settings)
	if err != nil {
		return err
	}
	caps := provider.Capabilities()
	hostFiles := caps.HostFiles
	remoteIso, hasRemoteIso := checkRemoteIsolation(f.sandbox, provider, caps)
	provider.Close()
	agents := server.Agents(&server.AgentsOptions{Dir: declarative.Dir(nil)})
	for _, n := range f.agents {
		if !slices.ContainsFunc(agents, func(ag server.Agent) bool { return ag.Name == n }) {
			return outpost.Errorf(outpost.Configuration, "doctor", "unknown agent %q (known: %s)", n, strings.Join(agentNames(agents), ", "))
		}
	}

	checks := []DoctorCheck{a.checkStore(ctx), checkServe(ctx, f.dockerTO), checkDocker(ctx, settings["host"], f.sandbox == "docker", f.dockerTO), checkBubblewrap(localIsolation(f.sandbox, settings))}
	if hasRemoteIso {
		checks = append(checks, remoteIso)
	}
	for _, ag := range agents {
		matters := slices.Contains(f.agents, ag.Name)
		checks = append(checks, checkKey(ag, f, hostFiles, matters), checkCLI(ag))
	}

	res := DoctorResult{Type: "result"}
	var first *DoctorCheck
	for i, c := range checks {
		switch c.Status {
		case DoctorFail:
			res.Failed++
			if first == nil {
				first = &checks[i]
			}
		case DoctorWarn:
			res.Warnings++
		}
	}
	var failed error
	if first != nil {
		what := first.Check
		if first.Agent != "" {
			what += " " + first.Agent
		}
		failed = &outpost.Error{Code: outpost.Code(first.Code), Op: "doctor", Msg: fmt.Sprintf("%s failed (%s): %s", plural.N(res.Failed, "check"), what, first.Message)}
	}
	res.ExitCode, res.Error = outpost.ExitCode(failed), ErrorToJSON(failed)
	if f.json {
		if err := writeJSONLines(a.stdout, checks); err != nil {
			return err
		}
		if err := writeJSONLines(a.stdout, []DoctorResult{res}); err != nil {
			return err
		}
		a.reported = true
		return failed
	}
	a.printDoctor(checks, f.sandbox, f.agents, res)
	a.reported = true
	return failed
}

// printDoctor prints the checks for a person: one line each, the fix
// under every warning and failure (an info's is in --json only), and a
// summary.
func (a *app) printDoctor(checks []DoctorCheck, sandbox string, agents []string, res DoctorResult) {
	tw := newTable(a.stdout, "STATUS", "CHECK", "RESULT")
	for _, c := range checks {
		name := c.Check
		if c.Agent != "" {
			name += " " + c.Agent
		}
		tw.row(c.Status, name, c.Message)
		if c.Fix != "" && (c.Status == DoctorWarn || c.Status == DoctorFail) {
			tw.row("", "", "fix: "+c.Fix)
		}
	}
	tw.flush()
	fmt.Fprintf(a.stdout, "\ncredentials checked for the %s sandbox; %s, %s", sandbox, plural.N(res.Failed, "failure"), plural.N(res.Warnings, "warning"))
	if len(agents) == 0 && res.Warnings > 0 {
		fmt.Fprint(a.stdout, " (--agent NAME makes the checks of an agent you run matter)")
	}
	fmt.Fprintln(a.stdout)
}

// localIsolation is the local sandbox's isolation setting in settings
// when the checked sandbox is local ("": the default).
func localIsolation(sandbox string, settings map[string]string) string {
	if sandbox != "local" {
		return ""
	}
	return settings["isolation"]
}

func agentNames(agents []server.Agent) []string {
	var out []string
	for _, ag := range agents {
		out = append(out, ag.Name)
	}
	return out
}

// checkStore opens the conversation store as every command does, lists
// it, and for a directory store checks that it can be written.
func (a *app) checkStore(ctx context.Context) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "store"}
	spec := a.storeFlag
	if spec == "" {
		spec = os.Getenv(storeEnv)
	}
	where := withoutPassword(spec)
	if spec == "" {
		where, _ = conversation.DefaultDir()
	} else if !postgres.IsConnString(spec) {
		where, _ = filepath.Abs(spec)
	}
	fail := func(err error, fix string) DoctorCheck {
		c.Status, c.Code, c.Message, c.Fix = DoctorFail, string(outpost.CodeOf(err)), errText(err), fix
		if c.Code == "" {
			c.Code = string(outpost.Conversation)
		}
		return c
	}
	const pick = "pick a store with --store DIR|postgres://... or OUTPOST_STORE (docs/stores.md)"
	s, err := a.store()
	if err != nil {
		return fail(err, pick)
	}
	if !postgres.IsConnString(spec) {
		if err := writable(where); err != nil {
			return fail(outpost.Errorf(outpost.Conversation, "store", "%s cannot be written: %v", where, err), "make it writable by this user, or "+pick)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := s.List(lctx)
	if err != nil && len(list) == 0 {
		return fail(outpost.Wrap(outpost.Conversation, "store", err), "check that the store is reachable, or "+pick)
	}
	c.Status, c.Message = DoctorOK, fmt.Sprintf("%s: %s", where, plural.N(len(list), "conversation"))
	if files, _ := a.spool.Files(); len(files) > 0 {
		c.Status = DoctorWarn
		c.Message += fmt.Sprintf("; %s waiting in the spool (%s)", plural.N(len(files), "turn"), a.spool.Dir())
		c.Fix, c.Code = "`outpost conversations sync` stores them", string(outpost.Conversation)
	}
	return c
}

// writable reports whether dir, or the nearest of its parents that
// exists (the store makes the rest), can be written by this user.
func writable(dir string) error {
	for {
		if fi, err := os.Stat(dir); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			return syscall.Access(dir, 2 /* W_OK */)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return errors.New("no directory of its path exists")
		}
		dir = parent
	}
}

// checkServe looks for `outpost serve` at its default socket.
func checkServe(ctx context.Context, timeout time.Duration) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "serve"}
	path, err := defaultSocket()
	if err != nil {
		c.Status, c.Message = DoctorInfo, err.Error()
		return c
	}
	if _, err := os.Lstat(path); err != nil {
		c.Status, c.Message = DoctorInfo, "no server at "+path+" (`outpost serve` starts one)"
		c.Fix = "`outpost serve` starts one there, for the HTTP API, its clients and MCP over HTTP (docs/serve.md)"
		return c
	}
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://outpost/healthz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		c.Status, c.Code, c.Message = DoctorWarn, string(outpost.Configuration), fmt.Sprintf("%s does not answer: %v", path, err)
		c.Fix = "a server that died left it: `outpost serve` replaces it"
		return c
	}
	defer resp.Body.Close()
	var h server.Health
	json.NewDecoder(resp.Body).Decode(&h)
	c.Status = DoctorOK
	c.Message = fmt.Sprintf("outpost serve answers at %s: %s, %d running, %d queued", path, orDefault(h.Status, resp.Status), h.Running, h.Queued)
	if h.Version != "" {
		c.Message += ", version " + h.Version
	}
	return c
}

// checkDocker pings the Docker Engine (it matters with --sandbox docker).
func checkDocker(ctx context.Context, host string, matters bool, timeout time.Duration) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "docker"}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	e, err := docker.Ping(pctx, host)
	if err != nil {
		c.Status, c.Code = DoctorWarn, string(outpost.Sandbox)
		if matters {
			c.Status = DoctorFail
		}
		c.Message, c.Fix = strings.TrimSuffix(err.Error(), "; "+docker.Fix), docker.Fix+" (needed by --sandbox docker only)"
		return c
	}
	c.Status, c.Message = DoctorOK, fmt.Sprintf("Docker Engine %s (%s/%s) at %s", e.Version, e.OS, e.Arch, e.Host)
	if e.OS != "" && e.OS != "linux" {
		c.Status, c.Code = DoctorWarn, string(outpost.Sandbox)
		if matters {
			c.Status = DoctorFail
		}
		c.Fix = "outpost needs an engine that runs Linux containers"
	}
	return c
}

// checkBubblewrap says whether bwrap is on the PATH and works here (the
// probe the local provider runs: isolate.Probe), and so how local leases
// run with mode, the local sandbox's isolation setting ("": the default,
// auto): in namespaces, or on the host. auto falling back to the host is
// a warning in capitals: the agent then reads what the user can read.
// Codex's own sandbox for the commands its model runs also uses bwrap on
// the local sandbox.
func checkBubblewrap(mode string) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "bubblewrap"}
	if mode == "" {
		mode = isolate.Auto
	}
	p, err := isolate.Probe("")
	switch {
	case mode == isolate.None:
		c.Status, c.Message = DoctorInfo, "isolation=none: local leases run on the host as your user (egress unenforced), as asked"
		if err == nil {
			c.Message += "; bwrap at " + p + " would isolate them (isolation=auto, the default)"
		}
		return c
	case err == nil:
		c.Status, c.Message = DoctorOK, "bwrap at "+p+" works here: local leases run isolated in namespaces (isolation="+mode+"), egress gateway enforced"
		return c
	case p != "":
		c.Status, c.Code = DoctorWarn, string(outpost.Configuration)
		c.Message = "LOCAL TURNS ARE NOT ISOLATED: bwrap at " + p + " cannot make namespaces here, so isolation=auto runs local leases on the host (they read what your user can read; egress unenforced): " + err.Error()
		c.Fix = "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a container, run it with the rights to create them), or say --set isolation=none to run on the host knowingly"
		return c
	}
	c.Status, c.Code = DoctorWarn, string(outpost.Configuration)
	c.Message = "LOCAL TURNS ARE NOT ISOLATED: bwrap is not on the PATH, so local leases cannot run isolated and isolation=auto runs them on the host (they read what your user can read; egress unenforced); Codex's own sandbox for its commands needs it too on the local sandbox"
	c.Fix = "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or say --set isolation=none to run on the host knowingly"
	return c
}

// checkRemoteIsolation says how the leases of a provider other than
// local that may isolate them (driver.IsolationNoter: ssh, bubblewrap on
// the host) run: in namespaces, as asked without, or, in capitals, why
// isolation=auto runs them without. false for the other providers (local
// has checkBubblewrap; docker and kubernetes isolate by container).
func checkRemoteIsolation(sandbox string, p driver.Provider, caps driver.Capabilities) (DoctorCheck, bool) {
	n, ok := p.(driver.IsolationNoter)
	if !ok || sandbox == "local" {
		return DoctorCheck{}, false
	}
	c := DoctorCheck{Type: "check", Check: "isolation"}
	note := n.IsolationNote()
	switch {
	case caps.Isolation == driver.IsolationNamespaces:
		c.Status, c.Message = DoctorOK, sandbox+" leases run in bubblewrap's namespaces on the host, egress gateway enforced"
	case note != "":
		c.Status, c.Code = DoctorWarn, string(outpost.Configuration)
		c.Message = "NOT ISOLATED: " + strings.TrimPrefix(note, "NOT ISOLATED: ")
		c.Fix = "install bubblewrap on the host and allow unprivileged user namespaces there, or say --set isolation=none to run as the host's user knowingly"
	default:
		c.Status, c.Message = DoctorInfo, sandbox+" leases run as the host's user (isolation=none, as asked; egress unenforced)"
	}
	return c, true
}

// checkKey runs the preflight (engine.Preflight) of one preset: which
// credential a turn would use, by name, or what to set.
func checkKey(ag server.Agent, f doctorFlags, hostFiles, matters bool) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "key", Agent: ag.Name}
	notOK := func(code outpost.Code, msg, fix string) DoctorCheck {
		c.Status, c.Code, c.Message, c.Fix = DoctorWarn, string(code), msg, fix
		if matters {
			c.Status = DoctorFail
		}
		return c
	}
	if ag.Error != "" {
		return notOK(outpost.Configuration, "the preset file does not load: "+ag.Error, "fix "+ag.File+" (docs/presets/custom.md)")
	}
	h, err := lookupPreset(ag)
	if err != nil {
		return notOK(outpost.Configuration, errText(err), "fix "+ag.File+" (docs/presets/custom.md)")
	}
	cred, err := engine.Preflight(h, &engine.PreflightOptions{Workdir: f.workdir, HostFiles: hostFiles})
	if err != nil {
		var oe *outpost.Error
		fix := errText(err)
		var mv *harness.MissingVariableError
		switch {
		case errors.As(err, &mv):
			fix = "set " + strings.Join(mv.Names, " or ")
		case errors.As(err, &oe):
			fix = strings.TrimPrefix(strings.TrimPrefix(oe.Message(), oe.Op+": "), h.Name+" has no credential: ")
		}
		return notOK(outpost.CodeOf(err), "no credential for a turn on the "+f.sandbox+" sandbox", fix)
	}
	c.Status = DoctorOK
	var from []string
	if len(cred.Variables) > 0 {
		from = append(from, strings.Join(cred.Variables, ", "))
	}
	for _, p := range cred.HostFiles {
		from = append(from, "the host's "+p)
	}
	if cred.Setup {
		from = append(from, "the preset's own login")
	}
	switch {
	case len(from) > 0:
		c.Message = strings.Join(from, "; ")
		if ag.Keyless == "yes" || (ag.Keyless == "base-url" && len(cred.Variables) > 0) {
			c.Message += " (keyless where the credential gateway can hold it: docs/security.md)"
		}
	default:
		c.Message = "none set, and none needed"
	}
	return c
}

// lookupPreset builds an agent of the list.
func lookupPreset(ag server.Agent) (*harness.Harness, error) {
	if ag.Source == server.SourceBuiltIn {
		if h, ok := presets.Lookup(ag.Name); ok {
			return h, nil
		}
		return nil, fmt.Errorf("preset %s is not registered", ag.Name)
	}
	return lookupAgent(ag.Name)
}

// checkCLI says whether the agent's pinned CLI is installed, and where.
func checkCLI(ag server.Agent) DoctorCheck {
	c := DoctorCheck{Type: "check", Check: "cli", Agent: ag.Name}
	if ag.Error != "" {
		c.Status, c.Message = DoctorInfo, "unknown: the preset file does not load"
		return c
	}
	version := ag.Version
	switch {
	case version == "":
		version = "no version pinned"
	case ag.Kind == "":
		version = "version " + version
	case ag.Kind != "self":
		version += " pinned"
	}
	switch {
	case ag.Kind == "self":
		c.Status, c.Message = DoctorOK, "outpost's own binary ("+ag.Path+")"
	case ag.Installed:
		where := "in the bootstrap cache"
		if dir, err := bootstrap.DefaultCacheDir(); err == nil {
			where += " (" + dir + ")"
		}
		if p, err := exec.LookPath(ag.Program); err == nil && p == ag.Path {
			where = "on the PATH at " + ag.Path + " (the local sandbox runs it; other sandboxes install the pinned one)"
		}
		c.Status, c.Message = DoctorOK, version+"; "+where
	case ag.Kind != "":
		c.Status, c.Message = DoctorInfo, version+"; not installed: the first turn downloads it (`outpost bootstrap "+ag.Name+"` now)"
		c.Fix = "`outpost bootstrap " + ag.Name + "` fetches it now (docs/bootstrap.md)"
	default:
		doc := ag.File
		if ag.Source == server.SourceBuiltIn {
			doc = "docs/presets/" + ag.Name + ".md"
		}
		c.Status, c.Message = DoctorInfo, version+"; "+orDefault(ag.Program, "its program")+" is not on the PATH, and outpost does not install it"
		c.Fix = "install " + orDefault(ag.Program, "its CLI") + " where the sandbox finds it (" + doc + ")"
	}
	return c
}
