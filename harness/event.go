package harness

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// EventType names a normalized event. The set is part of the wire contract
// of `outpost run --json` (docs/events.md).
type EventType string

const (
	// EventSession: the native conversation id is known (Session).
	EventSession EventType = "session"
	// EventMessage: assistant text. Delta marks a fragment of a message
	// still streaming; a message without Delta is complete.
	EventMessage EventType = "message"
	// EventReasoning: the model's visible reasoning or its summary.
	EventReasoning EventType = "reasoning"
	// EventToolCall: the agent invoked a tool (Tool.ID, Tool.Name, Tool.Input).
	EventToolCall EventType = "tool_call"
	// EventToolResult: a tool's result (Tool.ID, Tool.Output, Tool.Error).
	EventToolResult EventType = "tool_result"
	// EventUsage: token usage so far in this turn.
	EventUsage EventType = "usage"
	// EventNotice: progress or a warning (a retry, a steering
	// acknowledgement); never terminal.
	EventNotice EventType = "notice"
	// EventFailure: the agent reported a failure (Text). Whether the turn
	// fails is decided when the process ends.
	EventFailure EventType = "failure"
	// EventFinished: the agent's native final event (Text is the final
	// answer, Stop the stop reason).
	EventFinished EventType = "finished"
)

// KindLimit is the Kind of a failure event with which a decoder reports
// that the agent went over a budget the preset enforces (such as Codex's
// max-model-requests option); its Details["limit"] names the budget. The
// engine stops the turn at once, and the turn fails with code process and
// details.limit.
const KindLimit = "limit"

// KindUser is the Kind of a message event that holds what the user said:
// only a preset's History reports those (a turn's own events are the
// agent's).
const KindUser = "user"

// KindTurnFailed is the Kind of a failure event with which a live
// protocol reports that the agent ended the turn with an error (an Agent
// Client Protocol error response to session/prompt) while its process
// keeps running. The engine counts the turn as failed as it counts a
// process that exits non-zero: a Quota match makes it quota.
const KindTurnFailed = "turn_failed"

// EventTypes lists every event type.
var EventTypes = []EventType{EventSession, EventMessage, EventReasoning, EventToolCall, EventToolResult, EventUsage, EventNotice, EventFailure, EventFinished}

// Event is one normalized event. Field names are the wire contract.
type Event struct {
	Type  EventType `json:"type"`
	Agent string    `json:"agent,omitempty"`
	// Conversation is outpost's conversation id, once known.
	Conversation string    `json:"conversation,omitempty"`
	Time         time.Time `json:"time"`
	// Session is the agent's native conversation id (session events, and
	// every later event of the turn).
	Session string `json:"session,omitempty"`

	Text  string `json:"text,omitempty"`
	Delta bool   `json:"delta,omitempty"`
	// ID groups deltas of one message or reasoning block.
	ID string `json:"id,omitempty"`

	Tool  *Tool  `json:"tool,omitempty"`
	Usage *Usage `json:"usage,omitempty"`

	// Stop is the stop reason of a finished event.
	Stop string `json:"stop,omitempty"`
	// Kind refines notices and failures: "retry", "steer", "rate_limit",
	// "permission_denied", "line_too_long", "stderr", ...
	Kind string `json:"kind,omitempty"`
	// Details carries machine-readable facts (retry attempt, reset time).
	Details map[string]any `json:"details,omitempty"`

	// Raw is the native line the event was decoded from, when the caller
	// asked for raw lines. Redacted like every other field.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Tool describes a tool call or its result.
type Tool struct {
	ID     string          `json:"id,omitempty"`
	Name   string          `json:"name,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Output string          `json:"output,omitempty"`
	Error  bool            `json:"error,omitempty"`
}

// Usage is token usage. Complete is false when some counter was not
// reported, so a caller never mistakes a partial sum for a total.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	Complete         bool  `json:"complete"`
}

// Add returns u plus v; the sum is complete only if both are.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		Complete:         u.Complete && v.Complete,
	}
}

// Sub returns u minus v (for CLIs that report cumulative usage), never
// below zero.
func (u Usage) Sub(v Usage) Usage {
	d := func(a, b int64) int64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return Usage{
		InputTokens:      d(u.InputTokens, v.InputTokens),
		OutputTokens:     d(u.OutputTokens, v.OutputTokens),
		CacheReadTokens:  d(u.CacheReadTokens, v.CacheReadTokens),
		CacheWriteTokens: d(u.CacheWriteTokens, v.CacheWriteTokens),
		Complete:         u.Complete && v.Complete,
	}
}

// ExitStatus is how a process ended. A non-zero exit is a value, not an
// error.
type ExitStatus struct {
	Code   int    `json:"code"`             // exit code; -1 when killed by a signal
	Signal string `json:"signal,omitempty"` // the signal that killed it
}

// Success reports a zero exit.
func (s ExitStatus) Success() bool { return s.Code == 0 && s.Signal == "" }

// SafeJSON returns raw as JSON that is valid and valid UTF-8, so events
// always serialize: valid JSON is kept (invalid UTF-8 inside it replaced by
// U+FFFD), anything else becomes a JSON string. nil stays nil.
func SafeJSON(raw []byte) json.RawMessage {
	if raw == nil {
		return nil
	}
	if utf8.Valid(raw) && json.Valid(raw) {
		return append(json.RawMessage(nil), raw...)
	}
	if json.Valid(raw) {
		var v any
		if json.Unmarshal(raw, &v) == nil {
			if b, err := json.Marshal(v); err == nil {
				return b
			}
		}
	}
	b, _ := json.Marshal(string(raw))
	return b
}
