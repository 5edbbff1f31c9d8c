package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/output"
)

// Turn is one request to an agent. It serializes to JSON so the CLI and a
// server can take it as is.
type Turn struct {
	Agent  harness.Agent `json:"-"`
	Prompt string        `json:"prompt"`
	// Workdir is the caller's working directory on the host; "" means the
	// current directory. Its .outpost/.env is read.
	Workdir string `json:"workdir,omitempty"`
	// Resume continues the stored conversation with this id; Fork
	// continues it into a new conversation. At most one is set.
	Resume string `json:"resume,omitempty"`
	Fork   string `json:"fork,omitempty"`
	// Env are explicit variables for the agent (the CLI's --env), over
	// everything else but the provider's fixed names.
	Env map[string]string `json:"env,omitempty"`
	// Timeout bounds the whole turn (code timeout). Zero: no bound.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Inactivity stops a turn whose agent prints nothing for this long
	// (code process, details.unavailable, details.inactivity). Zero: the
	// preset's default; negative: none.
	Inactivity time.Duration `json:"inactivity,omitempty"`
	// Options are preset-specific settings; ExtraArgs pass through.
	Options   map[string]string `json:"options,omitempty"`
	ExtraArgs []string          `json:"extra_args,omitempty"`

	// Output is a JSON Schema (draft 2020-12) the answer must match; the
	// validated value is Result.Output (docs/output.md). A schema that is
	// not JSON, not valid or over 1 MiB is a configuration error.
	Output json.RawMessage `json:"output,omitempty"`
	// Repairs bounds the response repair attempts of a refused answer:
	// nil means DefaultRepairs (2), 0 disables repair.
	Repairs *int `json:"repairs,omitempty"`
	// Protocol "handoff" asks for the result/handoff block
	// (Result.Protocol). Exclusive with Output.
	Protocol string `json:"protocol,omitempty"`
	// ChangedFilesLimit bounds the workspace snapshots of
	// Result.ChangedFiles by file count: 0 means the default (20000), a
	// negative value turns changed files off.
	ChangedFilesLimit int `json:"changed_files_limit,omitempty"`
}

// RunOptions configure Run. A Provider or a Lease is required; the rest
// has defaults.
type RunOptions struct {
	// Lease runs the turn in a sandbox the caller holds (and keeps).
	Lease *Lease
	// Provider allocates a sandbox for this turn only, when Lease is nil.
	Provider driver.Provider
	// Store keeps conversations. Nil: no capture; resume and fork fail.
	Store conversation.Store
	// OnEvent receives every event as it happens, from one goroutine at a
	// time. A slow callback slows the agent down; nothing is buffered.
	OnEvent func(harness.Event)
	// Steer delivers messages to the running turn (harness.LiveInput), or,
	// for presets without live input, stops it and resumes the
	// conversation with the message.
	Steer <-chan string
	// Environ is the host environment variables are resolved from;
	// default os.Environ().
	Environ []string
	// Installer installs missing CLIs; default a zero bootstrap.Installer.
	Installer *bootstrap.Installer
	// Raw attaches each event's native line to it.
	Raw bool
	// Stderr receives the agent's standard error, redacted. Optional.
	Stderr io.Writer
	// Logger receives one debug record per lifecycle step with its
	// duration (attributes: step, ms, agent). Optional.
	Logger *slog.Logger
	// Grace is how long a stopped process has between SIGTERM and SIGKILL
	// (default 3s). MaxLine bounds one native output line (default 64 MiB;
	// longer lines are dropped with a notice).
	Grace   time.Duration
	MaxLine int
}

// Result describes a finished turn. It is returned with the error when the
// turn failed after starting, so callers keep the conversation id and
// usage.
type Result struct {
	// Conversation is the stored conversation's id (what Resume and Fork
	// take); empty when nothing was stored.
	Conversation string `json:"conversation"`
	// Parent is the conversation a fork came from.
	Parent string `json:"parent,omitempty"`
	Agent  string `json:"agent"`
	// Session is the agent's native conversation id.
	Session string `json:"session,omitempty"`
	Model   string `json:"model,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Text is the final answer.
	Text  string        `json:"text,omitempty"`
	Usage harness.Usage `json:"usage"`
	// ThreadUsage is the running total the agent itself keeps for the whole
	// native conversation (every turn so far and, for a fork, the history
	// it inherited), read from the captured files by the preset's
	// ThreadUsage hook; nil when the preset has none or nothing was
	// captured. Usage is this turn's own share.
	ThreadUsage *harness.Usage `json:"thread_usage,omitempty"`
	// Exit is the agent process's exit status, when it ran.
	Exit *harness.ExitStatus `json:"exit,omitempty"`
	// Steered counts messages delivered into the turn.
	Steered int `json:"steered,omitempty"`
	// Output is the validated answer of a turn with Turn.Output.
	Output json.RawMessage `json:"output,omitempty"`
	// Protocol is the parsed block of a turn with Turn.Protocol.
	Protocol *output.Outcome `json:"protocol,omitempty"`
	// ChangedFiles are the workspace files the turn created, modified or
	// deleted, computed by outpost from snapshots; nil when the sandbox
	// cannot describe its workspace.
	ChangedFiles *output.Changes `json:"changed_files,omitempty"`
	// Attempts are the answer's attempts (the turn, then each repair) with
	// their own usage, for a turn with Output or Protocol.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Run runs one turn through the ten lifecycle steps of
// docs/ARCHITECTURE.md. Refusals and configuration errors happen before a
// sandbox is allocated. Every error is an *outpost.Error with a code, and
// its text is redacted.
func Run(ctx context.Context, t Turn, o *RunOptions) (*Result, error) {
	if o == nil {
		o = &RunOptions{}
	}
	e := &engine{t: t, o: o, red: credentials.NewRedactor()}
	res, err := e.run(ctx)
	if err != nil {
		err = e.red.Error(err)
	}
	return res, err
}

type engine struct {
	mark time.Time
	t    Turn
	o    *RunOptions
	h    *harness.Harness
	red  *credentials.Redactor
	ans  answerState // structured answers (answer.go)

	vars     harness.Vars
	plan     harness.Plan
	config   harness.Configuration
	parent   conversation.Meta // resume/fork source
	parentFs []conversation.File
	convID   string

	inst     *bootstrap.Installer            // step 5's installer (sandbox/bootstrap.go)
	ownLease bool                            // the lease is this turn's alone
	put      func(ctx context.Context) error // deferred store write of step 10
	stored   string                          // conversation id once stored
}

func (e *engine) run(ctx context.Context) (*Result, error) {
	e.step("begin")
	// 1. Validate before allocation.
	if err := e.validate(ctx); err != nil {
		return nil, err
	}
	if err := e.prepareAnswer(); err != nil {
		return nil, err
	}
	e.step("validate")
	res := &Result{Agent: e.h.Name, Model: e.t.Agent.Model}
	if e.t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, e.t.Timeout, errTurnTimeout)
		defer cancel()
	}

	// 3. Lease.
	lease := e.o.Lease
	owned := lease == nil
	if owned {
		var err error
		lease, err = Acquire(ctx, e.o.Provider, driver.Options{Workdir: e.t.Workdir, Mounts: e.bootstrapMounts()})
		if err != nil {
			return nil, e.agentErr(err)
		}
		e.ownLease = true
	}
	e.step("lease")
	res.Sandbox = lease.Provider().Name()
	out, err := e.turn(ctx, lease, res)
	out, err = e.answer(ctx, lease, out, err)

	// The store write of step 10 and the release overlap: both are
	// filesystem-bound, and neither needs the other.
	var putErr, releaseErr error
	var wg sync.WaitGroup
	if e.put != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
			defer cancel()
			putErr = e.put(pctx)
		}()
	}
	if owned {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		releaseErr = lease.Close(rctx)
		cancel()
	}
	wg.Wait()
	e.step("store+release")
	if e.put != nil {
		err = e.afterCapture(out, err, putErr)
	}
	if err == nil && releaseErr != nil {
		err = e.agentErr(releaseErr)
	}
	return out, err
}

// afterCapture folds the capture's outcome into the turn's: a failed
// capture fails a successful turn with code conversation, and is recorded
// in the details of a failed one, never masking its code.
func (e *engine) afterCapture(res *Result, runErr, captureErr error) error {
	if captureErr == nil {
		if res != nil && e.stored != "" {
			res.Conversation = e.stored
		}
		return runErr
	}
	if runErr != nil {
		var oe *outpost.Error
		if errors.As(runErr, &oe) {
			oe.Detail("capture_error", captureErr.Error())
		}
		return runErr
	}
	return e.agentErr(outpost.Wrap(outpost.Conversation, "capture", captureErr))
}

// step logs the time since the previous step.
func (e *engine) step(name string) {
	if e.o.Logger == nil {
		return
	}
	now := time.Now()
	if !e.mark.IsZero() {
		e.o.Logger.Debug("outpost step", "step", name, "ms", float64(now.Sub(e.mark).Microseconds())/1000, "agent", e.t.Agent.Harness.Name)
	}
	e.mark = now
}

func (e *engine) agentErr(err error) error {
	var oe *outpost.Error
	if errors.As(err, &oe) && oe.Agent == "" {
		oe.Agent = e.h.Name
	}
	return err
}

func refuse(code outpost.Code, format string, args ...any) error {
	return outpost.Errorf(code, "validate", format, args...)
}

// validate is step 1 and 2: everything that can be refused without a
// sandbox.
func (e *engine) validate(ctx context.Context) error {
	t := e.t
	h := t.Agent.Harness
	if h == nil {
		return refuse(outpost.Configuration, "no agent preset")
	}
	e.h = h
	if err := h.Validate(); err != nil {
		return outpost.Wrap(outpost.Configuration, "validate", err)
	}
	if t.Agent.Kind != "" && t.Agent.Kind != "cli" {
		return refuse(outpost.Configuration, "agent kind %q is not supported (only \"cli\")", t.Agent.Kind)
	}
	if e.o.Lease == nil && e.o.Provider == nil {
		return refuse(outpost.Configuration, "no sandbox: set driver.Options.Lease or driver.Options.Provider")
	}
	if strings.TrimSpace(t.Prompt) == "" {
		return refuse(outpost.Configuration, "empty prompt")
	}
	if t.Resume != "" && t.Fork != "" {
		return refuse(outpost.Configuration, "resume and fork are exclusive")
	}
	if t.Resume != "" && !h.Resumable {
		return refuse(outpost.Refused, "agent %s cannot resume conversations", h.Name)
	}
	if t.Fork != "" && !h.Forkable {
		return refuse(outpost.Refused, "agent %s cannot fork conversations", h.Name)
	}
	if h.Bootstrap != "" && !e.installer().Known(h.Bootstrap) {
		return refuse(outpost.Configuration, "agent %s names unknown bootstrap %q (known: %v)", h.Name, h.Bootstrap, e.installer().Names())
	}
	if (t.Resume != "" || t.Fork != "") && e.o.Store == nil {
		return refuse(outpost.Configuration, "resume and fork need a conversation store")
	}
	for k := range t.Env {
		if !harness.ValidVariableName(k) {
			return refuse(outpost.Configuration, "invalid variable name %q", k)
		}
	}
	// 2. Resolve variables: the process env with .outpost/.env over it.
	environ := e.o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	wd := t.Workdir
	if wd == "" {
		wd, _ = os.Getwd()
	}
	table, err := credentials.Resolve(environ, wd)
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "env", err)
	}
	e.vars = table.Vars
	for name, v := range table.Vars {
		if table.FromDotEnv[name] && credentials.LooksSecret(name) {
			e.red.Add(v)
		}
	}
	for name, v := range t.Env {
		if credentials.LooksSecret(name) {
			e.red.Add(v)
		}
	}
	if h.Credentials != nil {
		if e.plan, err = h.Credentials(e.vars); err != nil {
			return e.planErr("credentials", err)
		}
		for _, v := range e.plan.Variables {
			e.red.Add(v)
		}
	}
	if h.Configuration != nil {
		if e.config, err = h.Configuration(e.vars); err != nil {
			return e.planErr("configuration", err)
		}
	}
	// Clashes with the provider's fixed names.
	caps := e.caps()
	if err := e.checkClash(caps.FixedEnv, nil); err != nil {
		return err
	}
	// The request must build; it is built again once the sandbox is known.
	if _, err := e.request(harness.Input{Prompt: t.Prompt, Model: t.Agent.Model, Workdir: wd, Options: t.Options, ExtraArgs: t.ExtraArgs}); err != nil {
		return err
	}
	// The conversation to continue must exist and belong to this agent.
	if ref := t.Resume + t.Fork; ref != "" {
		m, files, err := e.o.Store.Get(ctx, ref)
		if err != nil {
			return outpost.Wrap(outpost.Conversation, "locate", fmt.Errorf("conversation %s: %w", ref, err))
		}
		if m.Agent != h.Name {
			return refuse(outpost.Configuration, "conversation %s belongs to agent %s, not %s", ref, m.Agent, h.Name)
		}
		e.parent, e.parentFs = m, files
	}
	if t.Resume != "" {
		e.convID = e.parent.ID
	} else {
		e.convID = conversation.NewID()
	}
	return nil
}

func (e *engine) caps() driver.Capabilities {
	if e.o.Lease != nil {
		return e.o.Lease.Capabilities()
	}
	return e.o.Provider.Capabilities()
}

func (e *engine) planErr(op string, err error) error {
	var mv *harness.MissingVariableError
	if errors.As(err, &mv) {
		return &outpost.Error{Code: outpost.Configuration, Op: op, Agent: e.h.Name, Err: err}
	}
	return outpost.Wrap(outpost.Configuration, op, err)
}

func (e *engine) request(in harness.Input) (harness.Command, error) {
	cmd, err := e.h.Request(in)
	if err != nil {
		return cmd, outpost.Wrap(outpost.Configuration, "request", err)
	}
	if cmd.Path == "" {
		return cmd, refuse(outpost.Configuration, "agent %s built a command without a program", e.h.Name)
	}
	return cmd, e.checkClash(e.caps().FixedEnv, cmd.Env)
}

// checkClash refuses any variable a turn sets that the provider defines.
func (e *engine) checkClash(fixed []string, cmdEnv map[string]string) error {
	var clash []string
	for _, name := range fixed {
		for src, m := range map[string]map[string]string{
			"the agent's credentials": e.plan.Variables, "the agent's configuration": e.config.Variables,
			"the preset's variables": e.h.Variables, "--env": e.t.Env, "the agent's command": cmdEnv,
		} {
			if _, ok := m[name]; ok {
				clash = append(clash, name+" (set by "+src+")")
			}
		}
	}
	if len(clash) > 0 {
		return refuse(outpost.Configuration, "variables defined by the sandbox provider cannot be set: %s", strings.Join(clash, ", "))
	}
	return nil
}

// environment builds the process environment: provider defaults, then
// configuration, credentials, preset variables, the command's own, the
// caller's --env, and the provider's fixed names over all.
func (e *engine) environment(lease *Lease, cmdEnv map[string]string) map[string]string {
	pe := lease.Environment()
	env := maps.Clone(pe.Defaults)
	if env == nil {
		env = map[string]string{}
	}
	for _, m := range []map[string]string{e.config.Variables, e.plan.Variables, e.h.Variables, cmdEnv, e.t.Env} {
		maps.Copy(env, m)
	}
	maps.Copy(env, pe.Fixed)
	return env
}

// turn runs steps 4 to 10 in the leased sandbox.
func (e *engine) turn(ctx context.Context, lease *Lease, res *Result) (*Result, error) {
	h := e.h
	// 4. Credentials and configuration, once per harness per lease.
	if !lease.planned(h.Name) {
		files := append(append([]harness.File{}, e.plan.Files...), e.config.Files...)
		hostFiles := append(append([]harness.HostFile{}, e.plan.HostFiles...), e.config.HostFiles...)
		if len(files) > 0 || len(hostFiles) > 0 {
			release, err := credentials.Apply(ctx, lease, files, hostFiles, credentials.ApplyOptions{HostFiles: lease.Capabilities().HostFiles})
			if err != nil {
				return nil, e.stepErr(ctx, outpost.Configuration, "credentials", err)
			}
			if release != nil {
				lease.OnClose(release)
			}
		}
		for _, login := range e.plan.Login {
			r, err := lease.Exec(ctx, e.execRequest(lease, login), 64<<10)
			if err == nil && !r.Status.Success() {
				err = fmt.Errorf("login command %s exited with %d: %s", login.Path, r.Status.Code, bytes.TrimSpace(r.Stderr))
			}
			if err != nil {
				return nil, e.stepErr(ctx, outpost.Configuration, "login", err)
			}
		}
		lease.markPlanned(h.Name)
	}

	e.step("plans")
	// 6. Restore the conversation for resume or fork (before building the
	// command: a Fork hook needs it in place).
	in := harness.Input{Prompt: e.t.Prompt, Model: e.t.Agent.Model, Workdir: lease.Workdir(), Home: lease.Home(), Options: e.t.Options, ExtraArgs: e.t.ExtraArgs}
	if e.parent.ID != "" {
		if err := conversation.Restore(ctx, lease, h.Storage, e.parent.Native, lease.Workdir(), e.parentFs); err != nil {
			return nil, e.stepErr(ctx, outpost.Conversation, "restore", err)
		}
		in.Conversation = e.parent.Native
		if e.t.Fork != "" {
			res.Parent = e.parent.ID
			if h.Fork != nil {
				child, err := h.Fork(ctx, e.parent.Native, e.runner(lease))
				if err != nil {
					return nil, e.stepErr(ctx, outpost.Process, "fork", err)
				}
				in.Conversation = child
			} else {
				in.Fork = true
			}
		}
	}

	e.step("restore")
	in, err := e.answerInput(ctx, lease, in)
	if err != nil {
		return nil, err
	}
	// 5. Bootstrap the CLI if its executable is missing.
	var live harness.Live
	var cmd harness.Command
	if e.o.Steer != nil && h.LiveInput != nil && lease.Capabilities().Stdin {
		if live, err = h.LiveInput(in); err != nil {
			return nil, outpost.Wrap(outpost.Configuration, "request", err)
		}
		cmd = live.Command()
		if err := e.checkClash(lease.Capabilities().FixedEnv, cmd.Env); err != nil {
			return nil, err
		}
	} else if cmd, err = e.request(in); err != nil {
		return nil, err
	}
	path, err := e.installer().Ensure(ctx, lease, h.Bootstrap, cmd.Path, &bootstrap.EnsureOptions{Progress: e.bootstrapProgress})
	if err != nil {
		return nil, e.stepErr(ctx, outpost.Bootstrap, "bootstrap", err)
	}
	cmd.Path = path

	e.step("bootstrap")
	// 7 and 8. Run, stream, classify.
	st := &stream{e: e, lease: lease, live: live, in: in, native: in.Conversation}
	if in.Fork && h.Fork == nil {
		st.native = "" // the fork's id arrives with its session event
	}
	if cmd.Session != "" {
		st.native = cmd.Session // the preset chose it
	}
	e.snapshotBefore(ctx, lease)
	runErr := st.run(ctx, cmd)
	res.Session = st.native
	res.Text = st.final
	res.Exit = st.exit
	res.Steered = st.steered

	e.step("run")
	// 9. Usage by mode; transcript usage overrides.
	if st.usage != nil {
		res.Usage = *st.usage
	}
	if h.Usage == harness.UsageSession && h.UsageCommand != nil && st.native != "" && st.started {
		if c := h.UsageCommand(st.native); c != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			r, err := lease.Exec(uctx, e.execRequest(lease, *c), 1<<20)
			cancel()
			if err == nil && r.Status.Success() {
				if u := h.UsageResult(r.Stdout); u != nil {
					res.Usage = *u
				}
			}
		}
	}

	e.step("usage")
	// 10. Capture into the store. The store write itself is deferred to
	// overlap with the release when nothing in this turn needs it first.
	var captureErr error
	if h.Capture && e.o.Store != nil && st.native != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		var put func(context.Context) error
		put, captureErr = e.capture(cctx, lease, res, st)
		if captureErr == nil {
			if e.ownLease && st.pendingSteer == "" {
				e.put = put
			} else if captureErr = put(cctx); captureErr == nil {
				res.Conversation = e.stored
			}
		}
		cancel()
	}
	e.step("capture")
	if e.put == nil {
		runErr = e.afterCapture(res, runErr, captureErr)
	}
	if runErr != nil {
		return res, e.agentErr(runErr)
	}
	if st.pendingSteer != "" {
		return e.resumeWith(ctx, lease, res, st.pendingSteer)
	}
	return res, nil
}

// resumeWith continues a turn that was stopped to take a steering message
// (presets without live input).
func (e *engine) resumeWith(ctx context.Context, lease *Lease, prev *Result, msg string) (*Result, error) {
	if prev.Conversation == "" || !e.h.Resumable {
		return prev, outpost.Errorf(outpost.Refused, "steer", "agent %s cannot take a message while it works, and its conversation cannot be resumed", e.h.Name)
	}
	t := e.t
	t.Prompt, t.Resume, t.Fork, t.Timeout = msg, prev.Conversation, "", 0
	o := *e.o
	o.Lease = lease
	next := &engine{t: t, o: &o, red: e.red}
	next.ans.inner = true
	res, err := next.run(ctx)
	if res != nil {
		res.Usage = prev.Usage.Add(res.Usage)
		res.Steered += prev.Steered + 1
		if prev.Parent != "" {
			res.Parent = prev.Parent
		}
	}
	return res, err
}

// capture reads the conversation's files out of the sandbox (step 10) and
// returns the store write to run.
func (e *engine) capture(ctx context.Context, lease *Lease, res *Result, st *stream) (func(context.Context) error, error) {
	h := e.h
	files, err := conversation.Capture(ctx, lease, h.Storage, st.native)
	if err != nil {
		return nil, err
	}
	if h.TranscriptUsage != nil {
		t := conversation.TranscriptOf(st.native, files)
		if e.parent.ID != "" {
			t.Before = conversation.TranscriptOf(e.parent.Native, e.parentFs).Files
		}
		if u := h.TranscriptUsage(t); u != nil {
			res.Usage = *u
		}
	}
	if h.ThreadUsage != nil {
		if u := h.ThreadUsage(conversation.TranscriptOf(st.native, files)); u != nil {
			res.ThreadUsage = u
		}
	}
	now := time.Now().UTC()
	m := e.parent
	if e.t.Resume == "" {
		m = conversation.Meta{ID: e.convID, Created: now, Parent: res.Parent}
	}
	m.ID = e.convID
	m.Agent = h.Name
	m.Native = st.native
	m.Workdir = lease.Workdir()
	m.Sandbox = lease.Provider().Name()
	m.Model = e.t.Agent.Model
	m.Updated = now
	if e.t.Resume == "" {
		m.Turns, m.Usage = 1, res.Usage
	} else {
		m.Turns++
		m.Usage = m.Usage.Add(res.Usage)
	}
	m.Files = make([]string, 0, len(files))
	for _, f := range files {
		m.Files = append(m.Files, f.Path)
	}
	return func(ctx context.Context) error {
		if err := e.o.Store.Put(ctx, m, files); err != nil {
			return err
		}
		e.stored = m.ID
		return nil
	}, nil
}

func (e *engine) execRequest(lease *Lease, c harness.Command) driver.ExecRequest {
	return driver.ExecRequest{Path: c.Path, Args: c.Args, Env: e.environment(lease, c.Env), Dir: c.Dir}
}

func (e *engine) runner(lease *Lease) harness.Runner {
	return func(ctx context.Context, c harness.Command) ([]byte, error) {
		r, err := lease.Exec(ctx, e.execRequest(lease, c), 16<<20)
		if err != nil {
			return nil, err
		}
		if !r.Status.Success() {
			return r.Stdout, fmt.Errorf("%s exited with %d: %s", c.Path, r.Status.Code, bytes.TrimSpace(e.red.Bytes(r.Stderr)))
		}
		return r.Stdout, nil
	}
}

// stepErr codes a failed step, or reports cancellation or timeout when
// that is why it failed.
func (e *engine) stepErr(ctx context.Context, code outpost.Code, op string, err error) error {
	if ctx.Err() != nil {
		return e.agentErr(ctxError(ctx, op, err))
	}
	var oe *outpost.Error
	if errors.As(err, &oe) {
		return e.agentErr(err)
	}
	return &outpost.Error{Code: code, Op: op, Agent: e.h.Name, Err: err}
}

// stream runs the agent process and turns its output into events.
type stream struct {
	e     *engine
	lease *Lease
	live  harness.Live
	in    harness.Input
	// stop ends the process (see run); set before any output is read.
	stop func(reason string)

	emitMu sync.Mutex
	native string
	final  string
	usage  *harness.Usage
	exit   *harness.ExitStatus

	finished  bool
	failures  []string
	quotaText string
	// misconfigText is the first text the preset's Misconfigured matched.
	misconfigText string
	quotaEvent    map[string]any // Details of the failure event quotaText came from
	limit         *harness.Event // the first failure of kind harness.KindLimit
	unavailable   bool
	started       bool
	steered       int

	stderrMu   sync.Mutex
	stderrTail []string

	pendingSteer string
	stopReason   atomic.Value // string: "inactivity", "steer", "limit"
	activity     chan struct{}
}

const stderrTailLines = 20

// drainLimit bounds the wait for an agent's output after it exited and its
// group was killed.
const drainLimit = 10 * time.Second

func (s *stream) emit(ev harness.Event) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.emitLocked(ev)
}

func (s *stream) emitLocked(ev harness.Event) {
	e := s.e
	ev.Agent = e.h.Name
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Type == harness.EventSession && ev.Session != "" {
		s.native = ev.Session
	}
	if ev.Session == "" {
		ev.Session = s.native
	}
	ev.Conversation = e.convID
	if !e.o.Raw {
		ev.Raw = nil
	}
	ev.Raw = harness.SafeJSON(ev.Raw)
	if ev.Tool != nil {
		t := *ev.Tool
		t.Input = harness.SafeJSON(t.Input)
		ev.Tool = &t
	}
	e.red.Event(&ev)
	switch ev.Type {
	case harness.EventFinished:
		s.finished = true
		if ev.Text != "" {
			s.final = ev.Text
		}
		if ev.Usage != nil {
			u := *ev.Usage
			s.usage = &u
		}
	case harness.EventUsage:
		if ev.Usage != nil {
			u := *ev.Usage
			s.usage = &u
		}
	case harness.EventFailure:
		s.failures = append(s.failures, ev.Text)
		if ev.Kind == harness.KindLimit && s.limit == nil {
			lim := ev
			s.limit = &lim
			if s.stop != nil {
				go s.stop("limit") // the budget is spent: end the turn now
			}
		}
		quota := s.quotaText
		s.classify(ev.Text)
		if quota == "" && s.quotaText != "" {
			s.quotaEvent = ev.Details
		}
	case harness.EventMessage:
		if !ev.Delta && ev.Text != "" {
			s.final = ev.Text
		}
	}
	if e.o.OnEvent != nil {
		e.o.OnEvent(ev)
	}
}

func (s *stream) classify(text string) {
	h := s.e.h
	if s.quotaText == "" && h.Quota != nil && h.Quota(text) {
		s.quotaText = text
	}
	if h.Unavailable != nil && h.Unavailable(text) {
		s.unavailable = true
	}
	if s.misconfigText == "" && h.Misconfigured != nil && h.Misconfigured(text) {
		s.misconfigText = text
	}
}

func (s *stream) touch() {
	select {
	case s.activity <- struct{}{}:
	default:
	}
}

func (s *stream) run(ctx context.Context, cmd harness.Command) error {
	e := s.e
	lease := s.lease
	grace := e.o.Grace
	if grace <= 0 {
		grace = 3 * time.Second
	}
	req := e.execRequest(lease, cmd)
	req.Stdin = cmd.KeepStdin || len(cmd.Stdin) > 0 || s.live != nil
	if req.Stdin && !lease.Capabilities().Stdin {
		return outpost.Errorf(outpost.Configuration, "start", "the %s sandbox cannot give the agent a standard input", lease.Provider().Name())
	}
	p, err := lease.Start(ctx, req)
	if err != nil {
		serr := e.stepErr(ctx, outpost.Sandbox, "start", err)
		var oe *outpost.Error
		if ctx.Err() == nil && errors.As(serr, &oe) && oe.Code == outpost.Sandbox && lease.Vanished(context.WithoutCancel(ctx)) {
			oe.Msg = "the sandbox vanished before the agent started"
			oe.Detail("vanished", true)
		}
		return serr
	}
	s.started = true
	if cmd.Session != "" {
		s.emit(harness.Event{Type: harness.EventSession, Session: cmd.Session})
	}
	defer p.Close()

	// Standard input: fixed content, or the live protocol.
	var stdinMu sync.Mutex
	stdin := p.Stdin()
	closeStdin := func() {
		stdinMu.Lock()
		defer stdinMu.Unlock()
		if stdin != nil {
			stdin.Close()
			stdin = nil
		}
	}
	writeStdin := func(f func(w io.Writer) error) error {
		stdinMu.Lock()
		defer stdinMu.Unlock()
		if stdin == nil {
			return errors.New("standard input closed")
		}
		var buf bytes.Buffer
		if err := f(&buf); err != nil {
			return err
		}
		_, err := stdin.Write(buf.Bytes())
		return err
	}
	if s.live != nil {
		if err := writeStdin(s.live.Begin); err != nil {
			p.Signal(driver.Kill)
			p.Wait()
			return e.stepErr(ctx, outpost.Process, "start", err)
		}
	} else if stdin != nil {
		go func() {
			if len(cmd.Stdin) > 0 {
				writeStdin(func(w io.Writer) error { _, err := w.Write(cmd.Stdin); return err })
			}
			if !cmd.KeepStdin {
				closeStdin()
			}
		}()
	}

	// Watchdogs: cancellation, deadline, inactivity.
	s.activity = make(chan struct{}, 1)
	inactivity := e.t.Inactivity
	if inactivity == 0 {
		inactivity = e.h.Inactivity
	}
	var stopOnce sync.Once
	stop := func(reason string) {
		stopOnce.Do(func() {
			if reason != "" {
				s.stopReason.Store(reason)
			}
			closeStdin()
			stopProcess(p, grace)
		})
	}
	s.stop = stop
	exited := make(chan struct{})
	go func() {
		var timer *time.Timer
		var fire <-chan time.Time
		if inactivity > 0 {
			timer = time.NewTimer(inactivity)
			defer timer.Stop()
			fire = timer.C
		}
		for {
			select {
			case <-exited:
				return
			case <-ctx.Done():
				// A live session is first asked to interrupt its turn, so
				// the agent ends it cleanly (and records it); it is stopped
				// anyway after the grace period.
				if s.live != nil && s.interrupt(writeStdin) {
					t := time.NewTimer(grace)
					select {
					case <-exited:
						t.Stop()
						return
					case <-t.C:
					}
				}
				stop("")
				return
			case <-s.activity:
				if timer != nil {
					if !timer.Stop() {
						select {
						case <-timer.C:
						default:
						}
					}
					timer.Reset(inactivity)
				}
			case <-fire:
				stop("inactivity")
				return
			}
		}
	}()

	// Steering.
	if e.o.Steer != nil {
		go func() {
			for {
				select {
				case <-exited:
					return
				case msg, ok := <-e.o.Steer:
					if !ok {
						return
					}
					if s.live != nil {
						var mode harness.Steer
						err := writeStdin(func(w io.Writer) error {
							var err error
							mode, err = s.live.Send(w, msg)
							return err
						})
						if err != nil {
							s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: "message not delivered: " + err.Error(), Details: map[string]any{"delivered": false}})
							continue
						}
						s.emitMu.Lock()
						s.steered++
						s.emitMu.Unlock()
						s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: msg, Details: map[string]any{"mode": string(mode), "delivered": true}})
						continue
					}
					// No live input: stop the turn, resume with the message.
					s.emitMu.Lock()
					if s.pendingSteer != "" {
						s.pendingSteer += "\n\n"
					}
					s.pendingSteer += msg
					s.emitMu.Unlock()
					s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: msg, Details: map[string]any{"mode": string(harness.SteerResumed), "delivered": true}})
					stop("steer")
				}
			}
		}()
	}

	// Output.
	decode := e.h.Events
	if e.h.NewTurnDecoder != nil {
		decode = e.h.NewTurnDecoder(s.in)
	} else if e.h.NewDecoder != nil {
		decode = e.h.NewDecoder()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		readLines(p.Stdout(), e.o.MaxLine, func(line []byte, dropped int) {
			s.touch()
			if dropped > 0 {
				s.emit(harness.Event{Type: harness.EventNotice, Kind: "line_too_long", Text: fmt.Sprintf("dropped a native output line of %d bytes (limit %d)", dropped, maxLine(e.o.MaxLine)), Details: map[string]any{"bytes": dropped}})
				return
			}
			evs := s.decode(decode, line, writeStdin)
			for _, ev := range evs {
				if e.o.Raw {
					ev.Raw = rawJSON(line)
				}
				s.emit(ev)
			}
			if s.live != nil && s.live.Done() {
				closeStdin()
			}
		})
	}()
	go func() {
		defer wg.Done()
		var w io.Writer
		if e.o.Stderr != nil {
			w = e.o.Stderr
		}
		readLines(p.Stderr(), 1<<20, func(line []byte, dropped int) {
			s.touch()
			if dropped > 0 {
				return
			}
			text := string(line)
			s.emitMu.Lock()
			s.classify(text)
			s.emitMu.Unlock()
			s.stderrMu.Lock()
			s.stderrTail = append(s.stderrTail, text)
			if len(s.stderrTail) > stderrTailLines {
				s.stderrTail = s.stderrTail[1:]
			}
			s.stderrMu.Unlock()
			if w != nil {
				fmt.Fprintln(w, e.red.String(text))
			}
		})
	}()

	status, waitErr := p.Wait()
	// Nothing of the turn outlives it: kill what is left of the agent's
	// process group, so descendants let go of its output, then read the
	// output to its end. Only a descendant that left the group can keep
	// the streams open; it gets a bounded wait before they are closed.
	p.Signal(driver.Kill)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainLimit):
		p.Close()
		<-drained
	}
	close(exited)
	closeStdin()
	s.exit = &status
	return s.classifyEnd(ctx, status, waitErr)
}

// interrupt asks a live session to interrupt its turn and reports whether
// the preset wrote anything for it.
func (s *stream) interrupt(writeStdin func(func(io.Writer) error) error) bool {
	wrote := false
	err := writeStdin(func(w io.Writer) error {
		var buf bytes.Buffer
		if err := s.live.Interrupt(&buf); err != nil {
			return err
		}
		wrote = buf.Len() > 0
		_, err := w.Write(buf.Bytes())
		return err
	})
	return err == nil && wrote
}

func (s *stream) decode(decode func([]byte) []harness.Event, line []byte, writeStdin func(func(io.Writer) error) error) (evs []harness.Event) {
	defer func() {
		if r := recover(); r != nil {
			evs = []harness.Event{{Type: harness.EventNotice, Kind: "decode_error", Text: fmt.Sprintf("the %s preset failed to decode a line of %d bytes: %v", s.e.h.Name, len(line), r)}}
		}
	}()
	if s.live != nil {
		var out bytes.Buffer
		evs = s.live.Decode(line, &out)
		if out.Len() > 0 {
			writeStdin(func(w io.Writer) error { _, err := w.Write(out.Bytes()); return err })
		}
		return evs
	}
	return decode(line)
}

// classifyEnd is step 8.
func (s *stream) classifyEnd(ctx context.Context, st harness.ExitStatus, waitErr error) error {
	e := s.e
	h := e.h
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	op := "run"
	details := func(err *outpost.Error) *outpost.Error {
		err.Agent = h.Name
		err.Detail("exit_code", st.Code)
		if st.Signal != "" {
			err.Detail("signal", st.Signal)
		}
		s.stderrMu.Lock()
		if len(s.stderrTail) > 0 {
			err.Detail("stderr", e.red.String(strings.Join(s.stderrTail, "\n")))
		}
		s.stderrMu.Unlock()
		return err
	}
	// Asking whether the sandbox vanished may cost a round trip (docker):
	// ask once, and only when the turn failed.
	vanished := (waitErr != nil || !st.Success()) && s.lease.Vanished(context.WithoutCancel(ctx))
	if waitErr != nil || vanished {
		err := &outpost.Error{Code: outpost.Sandbox, Op: op, Agent: h.Name, Msg: "the sandbox failed during the turn", Err: waitErr}
		if vanished {
			err.Msg = "the sandbox vanished during the turn"
			err.Detail("vanished", true)
		}
		return err
	}
	if ctx.Err() != nil {
		return details(ctxError(ctx, op, nil).(*outpost.Error))
	}
	reason, _ := s.stopReason.Load().(string)
	if reason == "inactivity" {
		return details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent printed nothing for too long and was stopped"}).
			Detail("unavailable", true).Detail("inactivity", true)
	}
	if reason == "steer" {
		return nil
	}
	if s.limit != nil {
		var limit any = true
		if v, ok := s.limit.Details["limit"].(string); ok && v != "" {
			limit = v
		}
		return details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent went over its budget and was stopped: " + firstLine(s.limit.Text)}).
			Detail("limit", limit)
	}
	failed := !st.Success() || len(s.failures) > 0
	if failed && s.quotaText != "" {
		err := details(&outpost.Error{Code: outpost.Quota, Op: op, Msg: "the agent hit a usage or rate limit: " + firstLine(s.quotaText)})
		if h.QuotaDetails != nil {
			for k, v := range h.QuotaDetails(s.quotaText) {
				err.Detail(k, v)
			}
		}
		// The reset time the agent reported in the failure event's
		// details is exact; the text's is often to the minute at best.
		if r, ok := s.quotaEvent["resets_at"].(string); ok && r != "" {
			err.Detail("resets_at", r)
		}
		return err
	}
	if failed && s.misconfigText != "" {
		return details(&outpost.Error{Code: outpost.Configuration, Op: op, Msg: "the agent's credentials or configuration were refused: " + firstLine(s.misconfigText)}).
			Detail("agent_reported", true)
	}
	if !st.Success() {
		msg := fmt.Sprintf("the agent exited with status %d", st.Code)
		if st.Signal != "" {
			msg = "the agent was killed by " + st.Signal
		}
		if len(s.failures) > 0 {
			msg += ": " + firstLine(s.failures[len(s.failures)-1])
		} else if tail := s.lastStderr(); tail != "" {
			msg += ": " + tail
		}
		err := details(&outpost.Error{Code: outpost.Process, Op: op, Msg: msg})
		if s.unavailable {
			err.Detail("unavailable", true)
		}
		return err
	}
	if len(s.failures) > 0 {
		err := details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent reported a failure: " + firstLine(s.failures[len(s.failures)-1])})
		if s.unavailable {
			err.Detail("unavailable", true)
		}
		return err
	}
	if h.RequiresFinishedEvent && !s.finished {
		return details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent exited without its final event"}).Detail("finished", false)
	}
	return nil
}

func (s *stream) lastStderr() string {
	s.stderrMu.Lock()
	defer s.stderrMu.Unlock()
	for i := len(s.stderrTail) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(s.stderrTail[i]); t != "" {
			return firstLine(t)
		}
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

func maxLine(n int) int {
	if n <= 0 {
		return 64 << 20
	}
	return n
}

// readLines calls f for every line of r (without its newline). A line
// longer than max is dropped: f gets it as (nil, its length). It returns at
// EOF or on a read error.
func readLines(r io.Reader, max int, f func(line []byte, dropped int)) {
	max = maxLine(max)
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	dropping := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if complete {
				chunk = chunk[:len(chunk)-1]
			}
			switch {
			case dropping > 0:
				dropping += len(chunk)
			case len(buf)+len(chunk) > max:
				dropping = len(buf) + len(chunk)
				buf = buf[:0]
			case !complete || len(buf) > 0:
				buf = append(buf, chunk...)
			}
			if complete {
				switch {
				case dropping > 0:
					f(nil, dropping)
					dropping = 0
				case len(buf) > 0:
					f(bytes.TrimSuffix(buf, []byte{'\r'}), 0)
					buf = buf[:0]
				default:
					if l := bytes.TrimSuffix(chunk, []byte{'\r'}); len(bytes.TrimSpace(l)) > 0 {
						f(l, 0)
					}
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if dropping > 0 {
				f(nil, dropping)
			} else if len(bytes.TrimSpace(buf)) > 0 {
				f(buf, 0)
			}
			return
		}
	}
}

// rawJSON returns line as raw JSON when it is valid JSON, else as a JSON
// string, so an event's Raw field is always valid JSON.
func rawJSON(line []byte) []byte {
	if jsonValid(line) {
		return append([]byte(nil), line...)
	}
	return jsonString(line)
}
