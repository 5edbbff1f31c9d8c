package engine

import (
	"encoding/json"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/output"
)

// ResultLine is a finished turn on the wire: the last line of `outpost run
// --json` and the last event of a turn's stream in the HTTP API (`outpost
// serve`), documented in docs/events.md. Events before it are
// harness.Event values; one decoder reads both.
type ResultLine struct {
	Type         string        `json:"type"` // "result"
	Conversation string        `json:"conversation"`
	Parent       string        `json:"parent,omitempty"`
	Agent        string        `json:"agent"`
	Session      string        `json:"session,omitempty"`
	Model        string        `json:"model,omitempty"`
	Sandbox      string        `json:"sandbox,omitempty"`
	Text         string        `json:"text,omitempty"`
	Usage        harness.Usage `json:"usage"`
	// ThreadUsage is the agent's own running total for the whole native
	// conversation, when the preset reads one (Result.ThreadUsage).
	ThreadUsage *harness.Usage `json:"thread_usage,omitempty"`
	// Metered is the usage the credential gateway counted
	// (Result.Metered, docs/metering.md).
	Metered *harness.Metered `json:"metered,omitempty"`
	// StartedAt, CompletedAt and DurationMS bound the turn
	// (Result.StartedAt...); for an error before the turn began, the
	// caller's own (the CLI's command).
	StartedAt   time.Time `json:"started_at"`
	CompletedAt time.Time `json:"completed_at"`
	DurationMS  int64     `json:"duration_ms"`
	// Output is the validated answer of a schema turn; Protocol the parsed
	// block of a protocol turn; ChangedFiles the workspace files the turn
	// changed, as outpost computed them; Attempts each answer attempt's
	// usage and errors (docs/output.md).
	Output       json.RawMessage `json:"output,omitempty"`
	Protocol     *output.Outcome `json:"protocol,omitempty"`
	ChangedFiles *output.Changes `json:"changed_files,omitempty"`
	Attempts     []Attempt       `json:"attempts,omitempty"`
	// Checkpoint is the workspace checkpoint the turn recorded, Workdir
	// the directory --workspace chose (Result.Checkpoint,
	// docs/workspaces.md).
	Checkpoint *CheckpointResult `json:"checkpoint,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	Check      *CheckResult      `json:"check,omitempty"`
	// Secrets and Egress are the modes the turn ran with
	// (Result.Secrets, Result.Egress).
	Secrets string `json:"secrets,omitempty"`
	Egress  string `json:"egress,omitempty"`
	// ExitCode is the exit status `outpost run` exits with for this turn
	// (docs/errors.md).
	ExitCode int                `json:"exit_code"`
	Error    *outpost.ErrorJSON `json:"error"`
}

// NewResultLine is the wire form of what Run returned. res may be nil.
func NewResultLine(res *Result, err error) ResultLine {
	if res == nil {
		res = &Result{}
	}
	return ResultLine{
		Type: "result", Conversation: res.Conversation, Parent: res.Parent, Agent: res.Agent,
		Session: res.Session, Model: res.Model, Sandbox: res.Sandbox, Text: res.Text, Usage: res.Usage,
		ThreadUsage: res.ThreadUsage, Metered: res.Metered, StartedAt: res.StartedAt, CompletedAt: res.CompletedAt, DurationMS: res.DurationMS,
		Output: res.Output, Protocol: res.Protocol, ChangedFiles: res.ChangedFiles, Attempts: res.Attempts,
		Secrets: res.Secrets, Egress: res.Egress, Checkpoint: res.Checkpoint, Workdir: res.Workdir, Check: res.Check,
		ExitCode: outpost.ExitCode(err), Error: outpost.ToJSON(err),
	}
}
