package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/output"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// errTurnTimeout is the cause of a turn's context when its Timeout ran
// out.
var errTurnTimeout = fmt.Errorf("turn timeout")

// ctxError codes the end of ctx: timeout for a deadline (the turn's or the
// caller's), cancelled otherwise.
func ctxError(ctx context.Context, op string, cause error) error {
	code, msg := ctxCode(ctx.Err(), context.Cause(ctx))
	return &outpost.Error{Code: code, Op: op, Msg: msg, Err: cause}
}

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
	// ID is the id of the conversation a new turn (neither Resume nor
	// Fork) creates, chosen by the caller ahead of the turn (as `outpost
	// acp` names an ACP session before its first prompt): a
	// conversation.NewID that no stored conversation has. Empty: a fresh
	// one.
	ID string `json:"id,omitempty"`
	// Workspace is where the turn runs instead of Workdir: WorkspaceNew (a
	// fresh directory under WorkspacesDir) or a directory that must not
	// exist or be empty. A resume or fork writes into it the tree of the
	// checkpoint it continues (Fork "ID@TURN": that turn's), so forks run
	// side by side without sharing a directory (docs/workspaces.md).
	// Result.Workdir names it. Empty: Workdir, as it is.
	Workspace string `json:"workspace,omitempty"`
	// Wait is how long a resume waits for a conversation another turn
	// holds (a notice of kind "waiting" says so); zero fails at once with
	// code conversation, details.busy (docs/stores.md).
	Wait time.Duration `json:"wait,omitempty"`
	// Env are explicit variables for the agent (the CLI's --env), over
	// everything else but the provider's fixed names.
	Env map[string]string `json:"env,omitempty"`
	// Timeout bounds the whole turn (code timeout). Zero: no bound.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Inactivity stops a turn whose agent prints nothing for this long
	// (code process, details.stalled, details.inactivity); retry notices
	// are no activity. Zero: the
	// preset's default; negative: none.
	Inactivity time.Duration `json:"inactivity,omitempty"`
	// RetryBound is how long the agent may make no progress but retry
	// before the turn is an outage (code process, details.unavailable and
	// details.retrying). Zero: the preset's (harness.RetryBound);
	// negative: none.
	RetryBound time.Duration `json:"retry_bound,omitempty"`
	// Options are preset-specific settings; ExtraArgs pass through to the
	// CLI, placed by the preset (which refuses flags outpost controls).
	Options   map[string]string `json:"options,omitempty"`
	ExtraArgs []string          `json:"extra_args,omitempty"`
	// Command runs this executable in place of the preset's program (a
	// wrapper, or the CLI at a non-standard path), with the arguments the
	// preset builds. Bootstrap is then skipped.
	Command string `json:"command,omitempty"`

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
	Lease *sandbox.Lease
	// Provider allocates a sandbox for this turn only, when Lease is nil.
	Provider driver.Provider
	// Keep, with Provider, takes the sandbox the turn allocated once the
	// turn succeeded, instead of its release: the caller holds it from
	// then on (later turns run on it as Lease, and the caller closes it).
	// A turn that failed releases its sandbox, and Keep is not called.
	Keep func(*sandbox.Lease)
	// Store keeps conversations. Nil: no capture; resume and fork fail.
	Store conversation.Store
	// Spool keeps a turn's conversation that Store could not take within
	// StoreRetry (default DefaultStoreRetry); nil: the turn fails without
	// spooling (docs/stores.md).
	Spool      *conversation.Spool
	StoreRetry time.Duration
	// OnEvent receives every event as it happens, from one goroutine at a
	// time. A slow callback slows the agent down; nothing is buffered.
	OnEvent func(harness.Event)
	// Steer delivers messages to the running turn (harness.LiveInput), or,
	// for presets without live input, stops it and resumes the
	// conversation with the message.
	Steer <-chan string
	// Permission answers the agent's permission requests, for a preset
	// that routes them to the caller (harness.Asker: the ACP presets with
	// the option permissions=ask); it may block until a person decides,
	// and the inactivity watchdog waits meanwhile. Nil: such a preset
	// refuses every request.
	Permission harness.AskFunc
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
	// duration (attributes: step, ms, agent), and the records of the
	// turn's gateway grant (a warning when a model upstream breaks off a
	// reply). Optional.
	Logger *slog.Logger
	// Grace is how long a stopped process has between SIGTERM and SIGKILL
	// (default DefaultGrace). MaxLine bounds one native output line
	// (default 64 MiB; longer lines are dropped with a notice).
	Grace   time.Duration
	MaxLine int

	// Secrets is how the agent's model-API secrets reach it
	// (docs/security.md): SecretsGateway (the default where the preset
	// has an endpoint the gateway can serve) gives the sandbox the
	// credential gateway's address and a token that lives as long as the
	// turn; SecretsEnv puts the secrets in the sandbox as before. A turn
	// that asks for the gateway and cannot have it falls back to env with
	// a notice of kind "secrets".
	Secrets string
	// Egress is the network the sandbox may reach, for a sandbox this turn
	// opens: EgressGateway (nothing but the gateway and EgressAllow; the
	// default where the provider enforces it, Capabilities.Egress) or
	// EgressOpen (the default elsewhere). A lease the caller holds keeps
	// the egress it was opened with.
	Egress string
	// EgressAllow are the hosts ("docs.example.com", "*.example.org",
	// each with an optional ":port") the agent reaches through the
	// gateway's proxy (HTTPS_PROXY) in egress mode gateway. An entry may
	// allow only some methods and paths ("github.com GET,POST
	// /org/repo.git/info/refs /org/repo.git/git-upload-pack",
	// gateway.GrantOptions.Allow): the gateway then terminates TLS for
	// that host, and the turn's grant's CA goes into the lease's home with
	// the variables that make the sandbox trust it.
	EgressAllow []string
	// Gateway is the credential gateway the turn's grant is made on; nil:
	// the turn makes one of its own and closes it when it ends. A server
	// passes its one gateway to every turn.
	Gateway *gateway.Gateway

	// MaxTokens is the turn's token budget (--max-tokens), its repairs
	// included; Budget the conversation's (--budget), over all its turns,
	// kept with the conversation (a resume without one keeps the stored
	// one); Limits more budgets (outpost serve's per-token-name windows).
	// They are enforced by the credential gateway's meter
	// (docs/metering.md): a spent budget ends the turn with code budget.
	// Zero: none.
	MaxTokens int64
	Budget    int64
	Limits    []meter.Limiter
	// TracerProvider makes the turn's spans; nil: the global one (otel),
	// which records nothing unless tracing was set up.
	TracerProvider trace.TracerProvider

	// Checkpoint is CheckpointOn (the default, "" too) or CheckpointOff:
	// whether the workspace the turn starts from and the one it leaves are
	// recorded as git commits in the store's objects (docs/workspaces.md;
	// a store that keeps none, or no store, records none).
	// CheckpointInclude are gitignore-style patterns of ignored paths to
	// keep all the same.
	Checkpoint        string
	CheckpointInclude []string
	// Check is a shell command (sh -c) run in the sandbox, in the
	// workspace, once the turn succeeded and its checkpoint is taken
	// (Result.Check); CheckTimeout bounds it (default
	// DefaultCheckTimeout). A failing check does not fail the turn.
	Check        string
	CheckTimeout time.Duration

	// Owner is stamped on the conversation a turn creates (a new one or
	// a fork: conversation.Meta.Owner); a resume keeps the stored one.
	// outpost serve sets its peer (docs/serve.md, Tenancy).
	Owner string
	// GatewayOnly refuses, with code refused, a turn that would put
	// the agent's secrets in the sandbox (secrets mode env, asked for or
	// the fallback when the gateway cannot serve): outpost serve's
	// client policy (docs/serve.md).
	GatewayOnly bool

	metering *metering // the Run's meter, shared with its inner turns
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
	// StartedAt and CompletedAt bound the whole turn (Run's call and
	// return, UTC); DurationMS is the difference in milliseconds.
	StartedAt   time.Time `json:"started_at"`
	CompletedAt time.Time `json:"completed_at"`
	DurationMS  int64     `json:"duration_ms"`
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
	// Secrets is how the agent's secrets reached it: SecretsGateway,
	// SecretsEnv or SecretsNone. Egress is the sandbox's network:
	// EgressGateway, EgressOpen, or EgressUnenforced when gateway egress
	// was asked of a provider that cannot enforce it (local, ssh).
	Secrets string `json:"secrets,omitempty"`
	Egress  string `json:"egress,omitempty"`
	// Isolation is how the sandbox kept the agent's processes from the
	// host's (driver.Capabilities.Isolation, the effective mode): none,
	// namespaces, container, pod; local's isolation=auto without a
	// working bubblewrap says none here and in a degraded notice.
	Isolation string `json:"isolation,omitempty"`

	// Metered is the usage the credential gateway counted from the
	// model API's responses, in total and per model (docs/metering.md);
	// nil when the turn's model calls did not pass through a meter.
	Metered *harness.Metered `json:"metered,omitempty"`

	// Checkpoint is the workspace checkpoint the turn recorded; nil when
	// checkpoints are off or the turn stored no conversation. Workdir is
	// the directory the turn ran in, on the host, when Turn.Workspace
	// chose it.
	Checkpoint *CheckpointResult `json:"checkpoint,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	// Check is how RunOptions.Check ended; nil without one, or when the
	// turn failed.
	Check *CheckResult `json:"check,omitempty"`
}

// Run runs one turn through the ten lifecycle steps of
// docs/ARCHITECTURE.md. Refusals and configuration errors happen before a
// sandbox is allocated. Every error is an *outpost.Error with a code, and
// its text is redacted.
func Run(ctx context.Context, t Turn, o *RunOptions) (*Result, error) {
	if o == nil {
		o = &RunOptions{}
	}
	oc := *o // the Run's own metering, shared with its inner turns
	oc.metering = &metering{}
	o = &oc
	start := time.Now()
	e := &turnRun{t: t, o: o, red: credentials.NewRedactor()}
	res, err := e.run(ctx)
	if merr := e.markDotDir(start); merr != nil && err == nil {
		err = merr
	}
	e.releaseHold()
	if err != nil {
		err = e.red.Error(err)
	}
	if res != nil {
		end := time.Now()
		res.StartedAt, res.CompletedAt = start.UTC(), end.UTC()
		res.DurationMS = end.Sub(start).Milliseconds()
	}
	e.traceEnd(err)
	return res, err
}

// releaseTurnTimeout bounds the release of a sandbox leased for one turn.
const releaseTurnTimeout = 30 * time.Second

type turnRun struct {
	clock stepClock // the lifecycle steps' records and spans
	t     Turn
	o     *RunOptions
	h     *harness.Harness
	red   *credentials.Redactor
	ans   answerState // structured answers (answer.go)

	workdir  string // the caller's working directory on the host
	vars     harness.Vars
	dotenv   map[string]string       // the values of .outpost/.env
	dotDir   credentials.DotDirState // .outpost/ of dotWd before the agent ran; nil: not read
	dotWd    string                  // the directory whose .outpost/.env the turn read
	plan     harness.Plan
	config   harness.Configuration
	parent   conversation.Meta // resume/fork source
	parentFs []conversation.File
	convID   string
	model    string // the turn's model: the agent's, or the conversation's

	inst     *bootstrap.Installer            // step 5's installer (sandbox/bootstrap.go)
	ownLease bool                            // the lease is this turn's alone
	put      func(ctx context.Context) error // deferred store write of step 10
	stored   string                          // conversation id once stored
	hold     conversation.Hold               // the resumed conversation's (engine/hold.go)
	kl       keyless                         // the credential gateway (engine/keyless.go)
	outerKl  *keyless                        // an inner turn's outer turn's

	ws workspaceState // checkpoints and the turn's workspace (workspace.go)

	meterFrom int             // the Run's meter's calls before this engine's (metering.go)
	spanCtx   context.Context // the turn's span (tracing.go)
	span      trace.Span
}

func (e *turnRun) runSteps(ctx context.Context) (*Result, error) {
	e.clock.step("begin")
	// 1. Validate before allocation.
	if err := e.validate(ctx); err != nil {
		return nil, err
	}
	if err := e.prepareAnswer(); err != nil {
		return nil, err
	}
	e.clock.step("validate")
	res := &Result{Agent: e.h.Name, Model: e.model}
	if e.t.Workspace != "" {
		res.Workdir = e.workdir
	}
	if e.t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, e.t.Timeout, errTurnTimeout)
		defer cancel()
	}

	// 3. Lease.
	lease := e.o.Lease
	if lease == nil {
		var err error
		lease, err = sandbox.Acquire(ctx, e.o.Provider, driver.Options{Workdir: e.workdir, Mounts: e.bootstrapMounts(), Egress: e.kl.egress, Progress: e.imageProgress})
		if err != nil {
			return nil, settle(ctx, err)
		}
		e.ownLease = true
	}
	e.clock.step("lease")
	res.Sandbox = lease.Provider().Name()
	err := e.openGateway(ctx, lease, e.outerKl)
	defer e.closeGateway()
	res.Secrets, res.Egress, res.Isolation = e.kl.secrets, e.egressResult(lease), lease.Capabilities().Isolation
	var out *Result
	if err == nil {
		out, err = e.turn(ctx, lease, res)
		out, err = e.answer(ctx, lease, out, err)
	}
	return out, e.finish(ctx, lease, out, settle(ctx, err))
}

// finish runs the deferred store write of step 10 and the release of a
// lease of the turn's own. Both are filesystem-bound and neither needs the
// other: they overlap.
func (e *turnRun) finish(ctx context.Context, lease *sandbox.Lease, out *Result, err error) error {
	var putErr, releaseErr error
	var wg sync.WaitGroup
	if e.put != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.ReleaseTimeout)
			defer cancel()
			putErr = e.put(pctx)
		}()
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTurnTimeout)
		releaseErr = lease.Close(rctx)
		cancel()
	}
	keep := e.ownLease && e.o.Keep != nil && err == nil
	if e.ownLease && !keep {
		release()
	}
	wg.Wait()
	e.clock.step("store+release")
	if e.put != nil {
		err = e.afterCapture(out, err, putErr)
	}
	switch {
	case keep && err == nil:
		e.o.Keep(lease)
	case keep:
		release() // the store failed the turn
	}
	if err == nil && releaseErr != nil {
		err = releaseErr
	}
	return err
}

// turn runs steps 4 to 10 in the leased sandbox.
func (e *turnRun) turn(ctx context.Context, lease *sandbox.Lease, res *Result) (*Result, error) {
	// 4 to 6. Credentials and configuration, the restored conversation,
	// the command (bootstrapping the CLI).
	in, live, cmd, err := e.prepareTurn(ctx, lease, res)
	if err != nil {
		return nil, err
	}
	// 7 and 8. Run, stream, classify.
	st := newStream(e, lease, live, in, cmd)
	if err := e.beforeTurn(ctx, lease); err != nil {
		return nil, err
	}
	runErr := st.run(ctx, cmd)
	res.Session, res.Text, res.Exit, res.Steered = st.native, st.final, st.exit, st.steered
	e.noteDegraded(lease)
	e.clock.step("run")
	// 9 and 10. Usage, and capture into the store.
	runErr = e.afterAgent(ctx, lease, res, st, runErr)
	if runErr != nil {
		return res, runErr
	}
	if st.pendingSteer != "" {
		return e.resumeWith(ctx, lease, res, st.pendingSteer)
	}
	return res, nil
}

// noteDegraded gives a notice of kind degraded when the sandbox ran the
// turn's processes a slower way than designed (Lease.Degraded), once per
// Run: an inner turn runs on the same lease.
func (e *turnRun) noteDegraded(lease *sandbox.Lease) {
	if e.ans.inner {
		return
	}
	if err := lease.Degraded(); err != nil {
		e.notice("degraded", err.Error(), map[string]any{"sandbox": lease.ID()})
	}
}

// stepClock times the lifecycle steps. Each step ends with one record to
// the Logger (the --trace file) at once and, when the turn is traced, one
// child span of the turn's made as the turn ends (turnRun.endSpan), both
// timed since the previous step.
type stepClock struct {
	logger  *slog.Logger
	agent   string
	tracing bool
	mark    time.Time
	spans   []timedStep
}

// timedStep is one step's name and time, for its span.
type timedStep struct {
	name       string
	start, end time.Time
}

// step ends the step named name.
func (c *stepClock) step(name string) {
	if c.logger == nil && !c.tracing {
		return
	}
	now := time.Now()
	if !c.mark.IsZero() {
		if c.logger != nil {
			c.logger.Debug("step", "step", name, "ms", float64(now.Sub(c.mark).Microseconds())/1000, "agent", c.agent)
		}
		if c.tracing {
			c.spans = append(c.spans, timedStep{name, c.mark, now})
		}
	}
	c.mark = now
}

// agentName is the preset's name, "" before there is one.
func (e *turnRun) agentName() string {
	if h := e.t.Agent.Harness; h != nil {
		return h.Name
	}
	return ""
}

// trace writes one debug record to RunOptions.Logger (the trace of the
// CLI's --trace): events, classification decisions. Every value given is
// already redacted.
func (e *turnRun) trace(msg string, args ...any) {
	if e.o.Logger == nil {
		return
	}
	e.o.Logger.Debug(msg, append(args, "agent", e.agentName())...)
}

// traceEnd records how the turn ended: its code and details, or success.
func (e *turnRun) traceEnd(err error) {
	if e.o.Logger == nil {
		return
	}
	var oe *outpost.Error
	switch {
	case err == nil:
		e.trace("end", "code", "")
	case errors.As(err, &oe):
		e.trace("end", "code", string(oe.Code), "op", oe.Op, "error", err.Error(), "details", oe.Details)
	default:
		e.trace("end", "error", err.Error())
	}
}

// agentErr names the turn's agent in its error, once for every step
// (turnRun.run).
func (e *turnRun) agentErr(err error) error {
	var oe *outpost.Error
	if errors.As(err, &oe) && oe.Agent == "" {
		oe.Agent = e.agentName()
	}
	return err
}

// settle is a failed turn's error as the caller sees it: when the turn's
// context ended, that is why it failed (code cancelled or timeout, the
// step's error wrapped), whatever the step reported. Each step codes its
// own errors (outpost.Wrap); this is the one place that reads the context.
func settle(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	op := ""
	if oe := (*outpost.Error)(nil); errors.As(err, &oe) {
		if oe.Code == outpost.Cancelled || oe.Code == outpost.Timeout {
			return err
		}
		op = oe.Op
	}
	return ctxError(ctx, op, err)
}

// TracerName is the instrumentation scope of the turn's spans.
const TracerName = "github.com/outposthq/outpost/engine"

// run is one turn as a span, with a child span per lifecycle step
// (engine.step) and, from the credential gateway's meter, per model call.
// An inner turn (a repair, a resumed steer) is a child span of its
// outer turn's. The outermost closes the Run's metering.
func (e *turnRun) run(ctx context.Context) (*Result, error) {
	ctx = e.startSpan(ctx)
	e.meterMark()
	res, err := e.runSteps(ctx)
	err = e.agentErr(err)
	if !e.ans.inner {
		err = e.meterEnd(res, err)
	}
	e.endSpan(res, err)
	return res, err
}

func (e *turnRun) tracer() trace.Tracer {
	tp := e.o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// startSpan starts the turn's span ("outpost.turn", or "outpost.repair"
// for an inner turn) and returns its context.
func (e *turnRun) startSpan(ctx context.Context) context.Context {
	name := "outpost.turn"
	if e.ans.inner {
		name = "outpost.repair"
	}
	ctx, e.span = e.tracer().Start(ctx, name)
	e.spanCtx = ctx
	e.clock = stepClock{logger: e.o.Logger, agent: e.agentName(), tracing: e.span.IsRecording()}
	if e.span.IsRecording() {
		e.span.SetAttributes(attribute.String("outpost.agent", e.agentName()))
		if e.t.Resume != "" {
			e.span.SetAttributes(attribute.String("outpost.resume", e.t.Resume))
		}
	}
	return ctx
}

// endSpan ends the turn's span with its outcome.
func (e *turnRun) endSpan(res *Result, err error) {
	if !e.span.IsRecording() {
		e.span.End()
		return
	}
	for _, st := range e.clock.spans {
		_, s := e.tracer().Start(e.spanCtx, st.name, trace.WithTimestamp(st.start))
		s.End(trace.WithTimestamp(st.end))
	}
	if res != nil {
		e.span.SetAttributes(attribute.String("outpost.conversation", res.Conversation),
			attribute.String("outpost.sandbox", res.Sandbox), attribute.String("gen_ai.request.model", res.Model))
	}
	if err != nil {
		e.span.SetAttributes(attribute.String("outpost.code", string(outpost.CodeOf(err))))
		e.span.SetStatus(codes.Error, e.red.String(err.Error()))
	}
	e.span.End()
}
