package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Harness is the preset for one agent CLI. The zero value of every optional
// field means "not supported" or "default"; see each field.
type Harness struct {
	// Name is the agent's id ("echo", "claude", "codex"), used in events,
	// errors, stored conversations and the CLI's --agent flag. Required.
	Name string

	// Version is the CLI version this preset was proven against, for
	// display. Optional: the built-in presets leave it empty, as their
	// version is their bootstrap pin's ("outpost agents" shows it).
	Version string

	// Request builds the command of one turn. It must be pure (no disk or
	// network access): the turn engine calls it before starting anything.
	// Required.
	Request func(in Input) (Command, error)

	// Events decodes one line of the CLI's standard output into normalized
	// events. It must never panic, whatever the line holds (invalid JSON,
	// invalid UTF-8, megabytes); a line it does not understand gives no
	// events or a notice. The engine fills in Agent, Time and Conversation.
	// Required unless NewDecoder is set.
	Events func(line []byte) []Event

	// NewDecoder returns a stateful decoder for one turn, for CLIs whose
	// lines only make sense in sequence. When set it is used instead of
	// Events.
	NewDecoder func() func(line []byte) []Event

	// NewTurnDecoder is NewDecoder for decoders that need the turn's Input:
	// its options (a budget the decoder enforces, see KindLimit) or whether
	// it continues a conversation. When set the engine uses it instead of
	// NewDecoder and Events. A preset that sets it sets NewDecoder too, for
	// tools that decode recorded output without an Input.
	NewTurnDecoder func(in Input) func(line []byte) []Event

	// DecodeEnd makes the engine call the turn's decoder once more, with a
	// nil line, when standard output ends, so a decoder that accumulates
	// (plain-text output, whose whole text is the final message) can emit
	// its last events.
	DecodeEnd bool

	// Fork is the native fork step for CLIs that fork with a separate
	// command: given the parent's native id and a runner of commands inside
	// the leased sandbox, it returns the child's native id, which must
	// differ from the parent's (an empty or unchanged id fails the turn
	// with code process, the commands' output in its details). Omitted
	// where the CLI forks with a request flag (Input.Fork).
	Fork func(ctx context.Context, parent string, run Runner) (string, error)

	// Credentials selects, from the resolved variables, what the agent
	// needs to authenticate: variables, host files copied into the
	// sandbox's private home, generated files, login commands. Pure: no disk
	// access. Called once per preset per lease (a caller's lease that runs
	// several turns of the preset reuses the first plan). The local
	// provider receives only the plan's variables. Every variable value in
	// the plan is treated as a secret and redacted from all output.
	Credentials func(vars Vars) (Plan, error)

	// Configuration is the agent's non-secret configuration: files merged
	// into its home and variables, applied once per lease after
	// authentication (the credential plan's files and login commands). It fails with a *MissingVariableError when a variable it
	// references is not set.
	Configuration func(vars Vars) (Configuration, error)

	// Quota recognizes a terminal usage or rate-limit message in a failure
	// event's text or a stderr line (the engine gives Quota, QuotaDetails,
	// Unavailable and Misconfigured at most ClipText of it). When the
	// process then fails (exits
	// non-zero or is killed; a failure event on exit 0 is not enough), the
	// turn fails with code quota instead of process. Transient retry notices
	// must not match.
	Quota func(text string) bool

	// QuotaDetails extracts machine-readable facts from a text Quota
	// matched, such as "resets_at" (an RFC 3339 time). Optional.
	QuotaDetails func(text string) map[string]any

	// Unavailable recognizes a terminal outage: overload, 5xx, connection
	// failure. When the process then fails without a quota signal, the code
	// stays process and Details["unavailable"] is true. A text that both
	// Unavailable and Misconfigured match is an outage.
	Unavailable func(text string) bool

	// Misconfigured recognizes a terminal failure caused by the agent's
	// credentials or configuration: a key the model API refused (401/403),
	// a CLI that is not logged in, a missing required setting. When the
	// process then fails without a quota signal, the turn fails with code
	// configuration: retrying will not help, fixing the setup will. An
	// outage (Unavailable) in another text keeps the code process unless
	// this text is the terminal error (the last failure event's text, or
	// without one the last non-blank stderr line).
	Misconfigured func(text string) bool

	// UsageCommand returns a bounded read command run in the leased sandbox
	// after the turn (Usage mode UsageSession), and UsageResult decodes its
	// standard output into session totals. UsageResult never returns
	// transcript content.
	UsageCommand func(native string) *Command
	UsageResult  func(stdout []byte) *Usage

	// TranscriptUsage reads the turn's token usage from the captured
	// conversation files after the turn (Transcript.Before holds what was
	// restored before it). A non-nil result replaces the usage the events
	// reported, in the turn's Result and in the stored conversation's
	// totals.
	TranscriptUsage func(t Transcript) *Usage

	// ThreadUsage reads from the captured conversation files the running
	// total the CLI itself keeps for the whole native conversation: every
	// turn so far and, for a fork, the history it inherited. The engine
	// reports it as Result.ThreadUsage beside the turn's own usage.
	// Optional.
	ThreadUsage func(t Transcript) *Usage

	// History reads the conversation's exchange from its captured files,
	// oldest first, as normalized events: the user's prompts (message
	// events of Kind KindUser), the agent's answers (message), its
	// reasoning, tool calls and their results. It is what `outpost acp`
	// replays to an editor that loads a session (docs/acp.md). Never
	// returns secrets the files did not hold; nil: the preset cannot tell
	// (the session loads with no history shown). Optional.
	History func(t Transcript) []Event

	// Usage says where usage comes from. The zero value, UsageUnset,
	// counts the usage the events report without the completeness check.
	Usage UsageMode

	// LiveInput opens a live session for a turn whose caller wants to send
	// messages while the agent works. Nil means the CLI cannot take input
	// while it runs: steering then stops the turn and resumes its
	// conversation with the new message.
	LiveInput func(in Input) (Live, error)

	// LiveOnly says the CLI is driven only through its live protocol (an
	// Agent Client Protocol agent, harness/acp): every turn runs through
	// LiveInput, steered or not, and a sandbox without live standard input
	// cannot run it (code configuration). Request still describes the
	// command, for the checks and tools that read it, but the engine never
	// runs it without LiveInput. Needs LiveInput.
	LiveOnly bool

	// Bootstrap names the pinned CLI installed when the sandbox lacks the
	// command's executable: a pin of the turn's bootstrap installer (the
	// embedded bootstrap/pins.json, $OUTPOST_PINS, or the installer's own
	// Pins). A name the installer does not know fails before any sandbox
	// is allocated.
	Bootstrap string

	// RequiresFinishedEvent makes a turn whose output has no EventFinished
	// fail with code process, even when the process exits 0.
	RequiresFinishedEvent bool

	// Variables are added to every command of this agent, over the values
	// of .outpost/.env. A name the sandbox provider defines (HOME, ...) is a
	// configuration error.
	Variables map[string]string

	// Storage locates the CLI's native conversation files in the sandbox's
	// home. Nil means conversations of this agent are not portable.
	Storage *Storage

	// Capture saves the conversation into the store after every turn;
	// False avoids it. Unset: save as soon as Storage exists (Captures).
	Capture Tristate

	// Resumable: False refuses continuation and fork before any sandbox
	// is allocated. Unset: allowed when Storage exists (Resumes).
	Resumable Tristate
	// Forkable: False refuses a fork before any sandbox is allocated.
	// Unset or True allows it, through the Fork hook or the request
	// (Forks); a preset that is not resumable cannot fork either.
	Forkable Tristate

	// NativeSchema says the CLI enforces a JSON Schema itself: Request (and
	// LiveInput) pass Input.Schema or Input.SchemaFile to it (Claude Code
	// --json-schema, Codex --output-schema). Without it, a turn that asks
	// for a schema adds an instruction to the prompt instead. Outpost
	// validates every answer itself either way (docs/output.md).
	NativeSchema bool

	// Inactivity is the default watchdog: a turn whose process writes
	// nothing but retry notices for this long is stopped (code process,
	// details.stalled). Zero means no watchdog unless the turn sets one.
	Inactivity time.Duration

	// RetryBound is how long a turn may make no progress but retry (only
	// notices of kind "retry" since its last other output) before it is
	// an outage: stopped, code process, details.unavailable and
	// details.retrying. Zero: DefaultRetryBound; the turn can override it.
	RetryBound time.Duration

	// Endpoints are the model APIs the CLI calls with a secret, for the
	// credential gateway (docs/security.md): with them the sandbox
	// receives the gateway's address and a per-lease token in place of
	// each secret. A preset without them runs with its secrets in the
	// sandbox's environment (secrets mode env).
	Endpoints []Endpoint
}

// Endpoint is one model API the CLI calls, as the credential gateway
// needs to know it.
type Endpoint struct {
	// API is the protocol ("anthropic", "openai-responses",
	// "openai-chat", "gemini"): what a meter reads.
	API string
	// Secrets are the variables that may hold the credential, in the
	// preset's order of preference. The first one set is the one the
	// gateway holds; every one that is set is replaced by the token.
	Secrets []EndpointSecret
	// BaseURL is the variable from which the CLI, or the preset's
	// Configuration, reads the base URL: the engine sets it to the
	// gateway's. Its value on the host, if any, is the real upstream.
	BaseURL string
	// Default is the upstream when BaseURL is not set on the host. Empty:
	// the endpoint applies only when BaseURL is set (a CLI whose default
	// service is not an API-key endpoint).
	Default string
}

// EndpointSecret is a variable holding a credential, and how the
// upstream expects that credential: "x-api-key", "bearer" (an
// Authorization: Bearer header), "x-goog-api-key" or "query:key".
type EndpointSecret struct {
	Variable   string
	Credential string
}

// DefaultRetryBound is the RetryBound of presets that set none.
const DefaultRetryBound = 3 * time.Minute

// Tristate is a preset setting whose absence has a meaning of its own
// (the reference rules' defaults): Unset, True or False.
type Tristate uint8

const (
	Unset Tristate = iota
	True
	False
)

// Bool returns the setting, or def when it is unset.
func (t Tristate) Bool(def bool) bool {
	switch t {
	case True:
		return true
	case False:
		return false
	}
	return def
}

// TristateOf is True or False.
func TristateOf(b bool) Tristate {
	if b {
		return True
	}
	return False
}

// Captures reports whether the engine saves this preset's conversations
// after each turn: Capture, or when unset, whether Storage exists.
func (h *Harness) Captures() bool { return h.Storage != nil && h.Capture.Bool(true) }

// Resumes reports whether conversations can be continued: Resumable, or
// when unset, whether Storage exists.
func (h *Harness) Resumes() bool { return h.Storage != nil && h.Resumable.Bool(true) }

// Forks reports whether conversations can be forked: the preset resumes,
// and Forkable is not False.
func (h *Harness) Forks() bool { return h.Resumes() && h.Forkable.Bool(true) }

// KindCLI is the only agent kind: a CLI run as a process.
const KindCLI = "cli"

// Agent is what a turn runs: a preset and the model to ask it for.
type Agent struct {
	Kind    string   // required: KindCLI, the only kind
	Harness *Harness // the preset
	Model   string   // model name passed to the CLI; "" = the CLI's default
}

// Input is what Request and LiveInput receive for one turn.
type Input struct {
	Prompt  string // the user's message
	Model   string // the agent's model, "" for the CLI default
	Workdir string // working directory inside the sandbox
	Home    string // the sandbox's private home directory

	// Conversation is the native id to continue, "" for a new conversation.
	Conversation string
	// Fork asks to continue Conversation into a new child conversation.
	// Only set for presets without a Fork hook.
	Fork bool

	// Options are preset-specific settings (e.g. "permission-mode"); a
	// preset documents the names it reads and rejects unknown values.
	Options map[string]string
	// ExtraArgs are passed through to the CLI, placed by the preset.
	ExtraArgs []string

	// Schema is the JSON Schema (compact JSON) the answer must match, set
	// only for presets with NativeSchema; SchemaFile is the same document
	// written inside the sandbox (absolute path), for CLIs that take a
	// file. Both are empty when the turn asks for no schema.
	Schema     []byte
	SchemaFile string
}

// Command is one process to run inside a sandbox.
type Command struct {
	Path string            // executable, resolved in the sandbox's PATH if not absolute
	Args []string          // arguments, without the program name
	Env  map[string]string // variables added to the sandbox environment
	Dir  string            // working directory; "" = the turn's workdir
	// Stdin is written to the process's standard input, which is then
	// closed. With KeepStdin the pipe stays open for live input instead.
	Stdin     []byte
	KeepStdin bool
	// Session is the native conversation id the command starts or
	// continues, when the preset chooses it (Copilot's --session-id). The
	// engine then knows the id before the CLI prints anything: it emits a
	// session event when the process starts, every event carries the id,
	// and a turn that ends before the CLI reports it is still captured.
	// "" means the id arrives with the CLI's own session event.
	Session string
	// Files are written into the sandbox's home (paths relative to it)
	// before the process starts, such as a prompt passed as a file
	// (aider's --message-file). They stay in the private home until the
	// lease closes; a later turn's files replace them.
	Files []File
	// Prepare are commands run in the sandbox, in order, after the CLI is
	// installed and before this command starts, to ready a restored
	// conversation for this sandbox (OpenCode's rewrite of the directory a
	// session recorded). One whose Path is this command's own Path runs the
	// installed CLI. One that cannot run or exits non-zero fails the turn
	// with code conversation.
	Prepare []Command
}

// Runner runs a command inside the leased sandbox to completion. A
// command that runs and exits non-zero is a result, not an error: err is
// for a command that could not run (the sandbox failed). Used by Fork
// hooks.
type Runner func(ctx context.Context, cmd Command) (RunResult, error)

// RunResult is how a Runner's command ended: its output (each bounded)
// and exit status.
type RunResult struct {
	Stdout, Stderr []byte
	Status         ExitStatus
}

// Vars is the resolved variable table a plan selects from: the process
// environment with .outpost/.env over it.
type Vars map[string]string

// Lookup returns a variable and whether it is set to a non-empty value.
func (v Vars) Lookup(name string) (string, bool) {
	s, ok := v[name]
	return s, ok && s != ""
}

// MissingVariableError reports a variable a plan needs and did not find.
type MissingVariableError struct {
	Names []string // any one of these would do
	Why   string
}

func (e *MissingVariableError) Error() string {
	return fmt.Sprintf("missing variable %s: %s", strings.Join(e.Names, " or "), e.Why)
}

// Plan is what an agent needs to authenticate in a sandbox.
type Plan struct {
	// Variables are set in the agent's environment. All values are secret.
	Variables map[string]string
	// HostFiles are copied from the host into the sandbox's private home.
	// Providers without Capabilities.HostFiles (local) never receive them.
	HostFiles []HostFile
	// Files are generated into the sandbox's home.
	Files []File
	// Login commands run once in the sandbox after the files are in place.
	Login []Command
	// Need, when set, says the agent has no credential unless the plan
	// gives it one: a variable, a generated file, a login command, or a
	// host file that exists, on a provider that takes host files. Without
	// one the turn fails with code configuration before any sandbox is
	// allocated, and Need is the message ("set OPENAI_API_KEY or log in
	// with `codex login`").
	Need string
}

// Configuration is an agent's non-secret setup in a sandbox.
type Configuration struct {
	Variables map[string]string
	Files     []File
	HostFiles []HostFile
}

// HostFile is a file copied from the host into the sandbox's home.
type HostFile struct {
	Source   string // absolute host path
	Target   string // path relative to the sandbox home
	Mode     uint32 // 0 = 0600
	Optional bool   // skip silently when Source does not exist
	// Exclusive refuses to copy the same Source into two live leases at
	// once (single-use refresh tokens).
	Exclusive bool
}

// Merge says how a generated file combines with one already in the home.
type Merge string

const (
	Replace   Merge = ""     // overwrite
	MergeJSON Merge = "json" // deep-merge JSON objects, the file's keys win
	MergeTOML Merge = "toml" // append top-level keys that are absent
)

// MergeObjects deep-merges src into dst, as MergeJSON merges a file into
// the one in the home: objects merge, src's other values replace dst's.
func MergeObjects(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				MergeObjects(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// File is a file generated into the sandbox's home.
type File struct {
	Path    string // relative to the sandbox home
	Content []byte
	Mode    uint32 // 0 = 0600
	Merge   Merge
}

// UsageMode says where a preset's token usage comes from.
type UsageMode string

const (
	// UsageUnset: the usage events report is counted, without the
	// completeness check (it is taken as complete when reported).
	UsageUnset UsageMode = ""
	// UsageEvents: from usage and finished events; missing counters, or
	// no usage at all, mark it incomplete.
	UsageEvents UsageMode = "events"
	// UsageSession: UsageCommand after exit.
	UsageSession UsageMode = "session"
	// UsageUnavailable: the CLI reports none; nothing is recorded.
	UsageUnavailable UsageMode = "unavailable"
)

// Storage locates a CLI's native conversation files inside the sandbox
// home. Roots are clean, slash-separated paths relative to the home.
//
// The hooks see a file as rel: its path relative to the root it lies under,
// slash-separated and clean (no leading "./", no "..", never empty), e.g.
// "-work/abc.jsonl" for root ".claude/projects" and the file
// ~/.claude/projects/-work/abc.jsonl. When roots nest, a file belongs to the
// longest root containing it. Its stored, home-relative path is
// root + "/" + rel. A hook that panics fails the capture or restore.
type Storage struct {
	// Roots are the directories searched for conversation files; a
	// missing root is skipped.
	Roots []string
	// Match reports whether the regular file at rel belongs to the
	// conversation with native id. Directories and links are never offered.
	Match func(rel, native string) bool
	// Place returns the rel, under the same root, where a captured file
	// must be restored so the CLI finds native when run in workdir (e.g.
	// Claude Code's per-cwd project directory). It is called for every
	// restored file, ancestors' included, with the restored conversation's
	// native id; a result that is not a clean relative path fails the
	// restore (ErrUnsafe). Nil keeps the captured path.
	Place func(rel, native, workdir string) string
	// Ancestors returns the native ids a captured file (rel, content)
	// references and needs restored with it (a fork's parent chain).
	// Capture follows them recursively. Nil means none.
	Ancestors func(rel string, content []byte) []string
}

// Transcript is the captured conversation handed to TranscriptUsage.
type Transcript struct {
	Native string
	Files  map[string][]byte // home-relative path -> content
	// Before holds the files restored into the sandbox before the turn
	// (home-relative path -> content): the resumed conversation's, or the
	// parent's for a fork. Nil for a new conversation. A preset whose
	// transcript accumulates over turns subtracts what these already held.
	Before map[string][]byte
}

// Live is one running turn that accepts input. The engine owns the
// process's standard input and calls these methods with it; none of them
// may write a partial line.
type Live interface {
	// Command is the process to start for the live turn.
	Command() Command
	// Begin writes the opening messages (handshake, first prompt).
	Begin(w io.Writer) error
	// Decode turns one output line into events and writes any replies the
	// protocol needs (acknowledgements, follow-up requests) to w. It must
	// never panic.
	Decode(line []byte, w io.Writer) []Event
	// Send delivers a user message while the agent works and says how.
	Send(w io.Writer, text string) (Steer, error)
	// Interrupt asks the agent to stop the current turn.
	Interrupt(w io.Writer) error
	// Done reports whether the turn is over, so the engine closes stdin.
	Done() bool
}

// Steer says what happened to a message sent into a running turn.
type Steer string

const (
	SteerInjected Steer = "injected" // the agent sees it within the running turn
	SteerQueued   Steer = "queued"   // it runs as the next turn, in the same process
	SteerResumed  Steer = "resumed"  // the turn was stopped and the conversation resumed with it
)

// Validate reports an inconsistent preset: missing required hooks, a bad
// name, storage without a matcher, and similar mistakes that would
// otherwise surface in the middle of a turn.
func (h *Harness) Validate() error {
	if h == nil {
		return errors.New("harness: nil preset")
	}
	var errs []error
	if !nameRE.MatchString(h.Name) {
		errs = append(errs, fmt.Errorf("harness: name %q must match %s", h.Name, nameRE))
	}
	if h.Request == nil {
		errs = append(errs, fmt.Errorf("harness %s: Request is required", h.Name))
	}
	if h.LiveOnly && h.LiveInput == nil {
		errs = append(errs, fmt.Errorf("harness %s: LiveOnly needs LiveInput", h.Name))
	}
	if h.Events == nil && h.NewDecoder == nil && h.NewTurnDecoder == nil {
		errs = append(errs, fmt.Errorf("harness %s: Events, NewDecoder or NewTurnDecoder is required", h.Name))
	}
	if (h.UsageCommand == nil) != (h.UsageResult == nil) {
		errs = append(errs, fmt.Errorf("harness %s: UsageCommand and UsageResult go together", h.Name))
	}
	switch h.Usage {
	case UsageUnset, UsageEvents, UsageUnavailable:
	case UsageSession:
		if h.UsageCommand == nil {
			errs = append(errs, fmt.Errorf("harness %s: usage mode session needs UsageCommand", h.Name))
		}
	default:
		errs = append(errs, fmt.Errorf("harness %s: unknown usage mode %q", h.Name, h.Usage))
	}
	if h.Storage != nil {
		if len(h.Storage.Roots) == 0 || h.Storage.Match == nil {
			errs = append(errs, fmt.Errorf("harness %s: Storage needs Roots and Match", h.Name))
		}
		for _, r := range h.Storage.Roots {
			if !RelativePath(r) {
				errs = append(errs, fmt.Errorf("harness %s: storage root %q must be a relative path inside the home", h.Name, r))
			}
		}
	}
	for _, f := range []struct {
		name string
		t    Tristate
	}{{"Capture", h.Capture}, {"Resumable", h.Resumable}, {"Forkable", h.Forkable}} {
		name, t := f.name, f.t
		if t > False {
			errs = append(errs, fmt.Errorf("harness %s: %s is %d, not Unset, True or False", h.Name, name, t))
		}
		if t == True && h.Storage == nil {
			errs = append(errs, fmt.Errorf("harness %s: %s needs Storage", h.Name, name))
		}
	}
	if h.RetryBound < 0 {
		errs = append(errs, fmt.Errorf("harness %s: negative RetryBound", h.Name))
	}
	if h.QuotaDetails != nil && h.Quota == nil {
		errs = append(errs, fmt.Errorf("harness %s: QuotaDetails needs Quota", h.Name))
	}
	if h.Inactivity < 0 {
		errs = append(errs, fmt.Errorf("harness %s: negative Inactivity", h.Name))
	}
	for k := range h.Variables {
		if !varRE.MatchString(k) {
			errs = append(errs, fmt.Errorf("harness %s: variable name %q is not valid", h.Name, k))
		}
	}
	return errors.Join(errs...)
}

var (
	nameRE = lazyre.New(`^[a-z][a-z0-9-]{0,31}$`)
	varRE  = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidVariableName reports whether name can be an environment variable.
func ValidVariableName(name string) bool { return varRE.MatchString(name) }

// RelativePath reports whether p is a clean, relative, slash-separated path
// that stays inside its root (no "..", not absolute, not empty).
func RelativePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "" {
			return false
		}
	}
	return true
}

// MaxClassifiedText is how much of one failure text the engine gives a
// preset's classifiers (Quota, QuotaDetails, Unavailable, Misconfigured):
// its first and last halves, when it is longer (ClipText).
const MaxClassifiedText = 16 << 10

// ClipText keeps a text longer than MaxClassifiedText to its first and
// last halves, each on a line of its own. A failure message is short and
// sits at a text's start or end; without the bound, a hostile agent's
// 1 MiB stderr line cost some presets' patterns over 200 ms of CPU.
func ClipText(t string) string {
	if len(t) <= MaxClassifiedText {
		return t
	}
	return t[:MaxClassifiedText/2] + "\n" + t[len(t)-MaxClassifiedText/2:]
}
