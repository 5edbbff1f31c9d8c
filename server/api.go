package server

import (
	"encoding/json"
	"time"

	"github.com/outposthq/outpost/engine"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
)

// TurnRequest is the body of POST /v1/turns.
type TurnRequest struct {
	// Agent is a preset name; default: the conversation's for resume and
	// fork, else the server's default agent.
	Agent  string `json:"agent,omitempty"`
	Model  string `json:"model,omitempty"`
	Prompt string `json:"prompt"`
	// Sandbox is a provider the server allows; default the server's.
	Sandbox string `json:"sandbox,omitempty"`
	// Settings are provider settings; only the names the server allows
	// (default: image).
	Settings map[string]string `json:"settings,omitempty"`
	// Resume continues a stored conversation; Fork continues it into a new
	// one. At most one. A conversation id, a unique prefix or a native id.
	Resume string `json:"resume,omitempty"`
	Fork   string `json:"fork,omitempty"`
	// Env are variables for the agent (the CLI's --env). Secret-looking
	// names are redacted from everything the turn reports.
	Env map[string]string `json:"env,omitempty"`
	// Options are preset options (the CLI's --option).
	Options map[string]string `json:"options,omitempty"`
	// TimeoutMS bounds the turn (code timeout); 0: the server's ceiling.
	// Above the ceiling: refused.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// InactivityMS stops an agent that prints nothing for this long; 0:
	// the preset's default.
	InactivityMS int64 `json:"inactivity_ms,omitempty"`
	// Raw attaches each event's native line (redacted).
	Raw bool `json:"raw,omitempty"`
	// Secrets, Egress and EgressAllow are the credential gateway's modes
	// (the CLI's --secrets, --egress and --egress-allow;
	// engine.RunOptions): every turn of the server uses its one gateway.
	Secrets     string   `json:"secrets,omitempty"`
	Egress      string   `json:"egress,omitempty"`
	EgressAllow []string `json:"egress_allow,omitempty"`

	// Structured answers (docs/output.md): Schema is a JSON Schema the
	// answer must match (bounded by Options.MaxSchema), Repairs bounds the
	// repair attempts (nil: 2; 0: none), Protocol "handoff" asks for the
	// result/handoff block.
	Schema   json.RawMessage `json:"schema,omitempty"`
	Repairs  *int            `json:"repairs,omitempty"`
	Protocol string          `json:"protocol,omitempty"`

	// Workspaces (docs/workspaces.md). Workspace "new" runs the turn in a
	// fresh directory of the server's holding the files of the checkpoint
	// it continues (Fork "ID@TURN": that turn's), instead of the server's
	// working directory; no other value is taken (a client does not name
	// the server's directories). Checkpoint is "on" (the default) or
	// "off"; CheckpointInclude are gitignore patterns of ignored paths to
	// keep all the same. Check is a shell command run in the sandbox after
	// a turn that succeeded (the result's check), bounded by
	// CheckTimeoutMS (0: 10 minutes; at most the server's ceiling).
	Workspace         string   `json:"workspace,omitempty"`
	Checkpoint        string   `json:"checkpoint,omitempty"`
	CheckpointInclude []string `json:"checkpoint_include,omitempty"`
	Check             string   `json:"check,omitempty"`
	CheckTimeoutMS    int64    `json:"check_timeout_ms,omitempty"`

	// MaxTokens is the turn's token budget (the CLI's --max-tokens) and
	// Budget the conversation's over all its turns (--budget), counted
	// at the credential gateway: crossing one ends the turn with code
	// budget (docs/metering.md). 0: none.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	Budget    int64 `json:"budget,omitempty"`
}

// RaceRequest is the body of POST /v1/races: one task run as several
// turns at once, each in its own sandbox and workspace made from one
// starting checkpoint, checked, with a winner (engine.Race,
// docs/workspaces.md).
type RaceRequest struct {
	// Prompt is the task every contestant gets.
	Prompt string `json:"prompt"`
	// Agents are the presets that race, each Count times (default 1);
	// default: the server's default agent. At most MaxRaceContestants in
	// all.
	Agents []string `json:"agents,omitempty"`
	Count  int      `json:"count,omitempty"`
	// Model is asked of every agent; default each CLI's.
	Model string `json:"model,omitempty"`
	// Check is the shell command run in each sandbox after its turn: a
	// contestant passes when it exits 0 (no check: when its turn
	// succeeded). CheckTimeoutMS bounds it (0: 10 minutes).
	Check          string `json:"check,omitempty"`
	CheckTimeoutMS int64  `json:"check_timeout_ms,omitempty"`
	// Judge is a preset that picks the winner among the passing
	// contestants after reading their diffs; without one, the passing
	// contestant with the fewest tokens wins.
	Judge string `json:"judge,omitempty"`
	// From ("ID[@TURN]") starts every contestant from that checkpoint
	// instead of the server's working directory.
	From string `json:"from,omitempty"`
	// MaxTokens bounds each contestant's turn, Budget all of them
	// together (code budget for the turn that crosses it).
	MaxTokens int64 `json:"max_tokens,omitempty"`
	Budget    int64 `json:"budget,omitempty"`
	// TimeoutMS bounds each contestant's turn; 0: the server's ceiling.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Options are preset options for every contestant, AgentOptions a
	// preset's own (over Options): e.g. {"claude": {"permission-mode":
	// "acceptEdits"}}, so that a contestant may edit its workspace. Env
	// are variables for every contestant.
	Options      map[string]string            `json:"options,omitempty"`
	AgentOptions map[string]map[string]string `json:"agent_options,omitempty"`
	Env          map[string]string            `json:"env,omitempty"`
	// Sandbox, Settings, Secrets, Egress and EgressAllow are a turn's.
	Sandbox     string            `json:"sandbox,omitempty"`
	Settings    map[string]string `json:"settings,omitempty"`
	Secrets     string            `json:"secrets,omitempty"`
	Egress      string            `json:"egress,omitempty"`
	EgressAllow []string          `json:"egress_allow,omitempty"`
}

// MaxRaceContestants bounds a race's contestants (agents × count).
const MaxRaceContestants = 16

// A race's stream (POST /v1/races with Accept: text/event-stream) carries
// RaceProgress, RaceEvent, then a RaceResultLine per contestant and the
// RaceLine last.

// RaceProgress is one step of a contestant (type "progress"): state
// "started" (it has a slot and starts), "finished" (its turn ended),
// "checked" (its check ran; passed says how).
type RaceProgress struct {
	Type string `json:"type"`
	engine.RaceProgress
}

// RaceEvent is one event of a contestant's turn, tagged with its index.
type RaceEvent struct {
	harness.Event
	Contestant int `json:"contestant"`
}

// RaceResultLine is a contestant's result line, tagged with its index.
type RaceResultLine struct {
	engine.ResultLine
	Contestant int `json:"contestant"`
}

// RaceLine is the race's outcome (type "race"), the shape of the last
// line of `outpost race --json`: winner is -1 when no contestant passed.
type RaceLine struct {
	Type string `json:"type"`
	*engine.RaceResult
}

// RaceResponse is POST /v1/races's answer to a plain JSON request: every
// contestant's result line, and the race.
type RaceResponse struct {
	Results []RaceResultLine `json:"results"`
	Race    RaceLine         `json:"race"`
}

// Diff is GET /v1/conversations/{id}/diff?format=json: the commits
// compared and each file's change (the shape of `outpost diff --json`
// without its type).
type Diff = conversation.TurnDiff

// Turn states.
const (
	StateQueued   = "queued"
	StateRunning  = "running"
	StateFinished = "finished"
)

// TurnStatus is a turn as GET /v1/turns/{id} and POST /v1/turns report it.
type TurnStatus struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Agent   string `json:"agent"`
	Sandbox string `json:"sandbox"`
	// Events is the sequence number of the last event so far (the result
	// line included once finished).
	Events   int64      `json:"events"`
	Created  time.Time  `json:"created"`
	Started  *time.Time `json:"started,omitempty"`
	Finished *time.Time `json:"finished,omitempty"`
	// Replica is the fleet replica that runs the turn (Options.Replica;
	// empty without a turn store).
	Replica string `json:"replica,omitempty"`
	// Model is the model asked for, or the one the agent named in its
	// session event; Usage the agent's tokens so far (its last usage
	// event), while it runs and after. Prompt is the turn's prompt,
	// redacted like its events. The three are known to the replica that
	// runs the turn (another replica of a fleet reports its record only).
	Model  string         `json:"model,omitempty"`
	Usage  *harness.Usage `json:"usage,omitempty"`
	Prompt string         `json:"prompt,omitempty"`
	// Result is the turn's result line once finished.
	Result *engine.ResultLine `json:"result,omitempty"`
}

// TurnList is the answer of GET /v1/turns.
type TurnList struct {
	Turns []TurnStatus `json:"turns"`
}

// SteerRequest is the body of POST /v1/turns/{id}/messages.
type SteerRequest struct {
	Text string `json:"text"`
}

// SteerResponse acknowledges a message taken for delivery.
type SteerResponse struct {
	Accepted bool `json:"accepted"`
}

// ErrorResponse is every error the API returns.
type ErrorResponse struct {
	Error *outpost.ErrorJSON `json:"error"`
}

// Usage is a conversation's usage (the shape of `outpost usage --json`).
type Usage struct {
	Conversation string        `json:"conversation"`
	Agent        string        `json:"agent"`
	Turns        int           `json:"turns"`
	Usage        harness.Usage `json:"usage"`
	// Metered is the credential gateway's count, per model; Budget the
	// conversation's token budget and BudgetLeft what is left of it
	// (docs/metering.md).
	Metered    *harness.Metered `json:"metered,omitempty"`
	Budget     int64            `json:"budget,omitempty"`
	BudgetLeft *int64           `json:"budget_left,omitempty"`
}

// Health is GET /healthz.
type Health struct {
	Status  string `json:"status"` // "ok" or "draining"
	Version string `json:"version,omitempty"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
}
