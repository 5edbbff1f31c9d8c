// Package outpost holds the error model shared by every outpost package:
// the coded *Error, its Code constants, and the helpers CodeOf, ExitCode and
// UnavailableFault. It imports nothing of outpost, so every package can
// return coded errors without import cycles.
//
// The runtime itself lives in subpackages: harness (agent presets), sandbox
// (providers and the turn engine), conversation (portable conversations),
// credentials (variables, plans and redaction) and bootstrap (pinned CLI
// installs). See docs/ARCHITECTURE.md.
package outpost

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Code classifies a failure so callers can react without parsing text.
// The set is closed: every error outpost returns carries one of these.
type Code string

const (
	// Configuration: the request or the environment is wrong (unknown agent,
	// broken .env, missing variable, clash with a provider variable).
	Configuration Code = "configuration"
	// Refused: the agent cannot do what was asked (resume of a
	// non-resumable agent, fork of a non-forkable one). Nothing was started.
	Refused Code = "refused"
	// Sandbox: the sandbox could not be allocated, used or released, or it
	// vanished during the turn.
	Sandbox Code = "sandbox"
	// Bootstrap: installing the pinned agent CLI failed (download, digest,
	// extraction).
	Bootstrap Code = "bootstrap"
	// Conversation: the conversation could not be found, restored or captured.
	Conversation Code = "conversation"
	// Process: the agent process failed (non-zero exit, crash, missing final
	// event). Details["unavailable"] is true when it failed because its
	// model service was unreachable or overloaded.
	Process Code = "process"
	// Quota: the agent reported a terminal usage or rate limit.
	// Details["resets_at"] holds the reset time when the agent said it.
	Quota Code = "quota"
	// Timeout: the turn's deadline passed (the inactivity watchdog is
	// Process with Details["stalled"]).
	Timeout Code = "timeout"
	// Cancelled: the caller cancelled the turn.
	Cancelled Code = "cancelled"
	// Output: the agent's answer did not match the turn's schema or
	// protocol, and repair was exhausted or not possible. Details hold
	// "errors" (JSON pointer and message), "attempts", "raw" (the last
	// final text, redacted and bounded) and, when repair was not
	// possible, "repair" (why).
	Output Code = "output"
	// Budget: a token budget of outpost's own was spent and the credential
	// gateway refused the turn's next model call (docs/metering.md).
	// Details hold "limit" and "spent" (tokens) and "budget" ("turn",
	// "conversation" or "token"; "window", "hour" or "day", for a token's).
	Budget Code = "budget"
)

// Codes lists every code in a stable order.
var Codes = []Code{Configuration, Refused, Sandbox, Bootstrap, Conversation, Process, Quota, Output, Budget, Timeout, Cancelled}

// Error is the one error type outpost returns from its portable layer.
// It is created once, at the step that knows the category, and wraps the
// underlying cause. Its message never contains a secret value: the turn
// engine redacts it before returning.
type Error struct {
	Code    Code           // category, never empty
	Op      string         // the step that failed, e.g. "lease", "start", "capture"
	Agent   string         // agent preset name, when known
	Msg     string         // human-readable summary; Err is appended in Error()
	Details map[string]any // machine-readable facts (exit_code, unavailable, resets_at, ...)
	Err     error          // the cause, may be nil

	sentinel bool
}

// New returns a coded error with a message.
func New(code Code, op, msg string) *Error { return &Error{Code: code, Op: op, Msg: msg} }

// Errorf returns a coded error whose message is formatted; a %w verb sets
// the cause.
func Errorf(code Code, op, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Op: op, Msg: err.Error()}
	if u := errors.Unwrap(err); u != nil {
		e.Err = u
		// The message already contains the cause's text; keep Msg as the
		// prefix only so Error() does not repeat it.
		e.Msg = strings.TrimSuffix(strings.TrimSuffix(err.Error(), u.Error()), ": ")
	}
	return e
}

// Wrap returns err as a coded error. A nil err gives nil. An err that is
// already an *Error keeps its code; Op and Agent are filled in if empty.
func Wrap(code Code, op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Op == "" {
			e.Op = op
		}
		return err
	}
	return &Error{Code: code, Op: op, Err: err}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	// An Op that only repeats the code ("output: output: ...") says nothing.
	if e.Op != "" && e.Op != string(e.Code) {
		b.WriteString(": ")
		b.WriteString(e.Op)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return onceCode(b.String(), e.Code)
}

// onceCode drops from s, an error's text that begins with its code, the
// code's later "code: " prefixes: a package's sentinel or a cause of the
// same code says it again ("conversation: locate: X: conversation: not
// found" reads "conversation: locate: X: not found").
func onceCode(s string, c Code) string {
	head, rest := string(c), s[len(c):]
	repeat := ": " + string(c) + ": "
	for strings.Contains(rest, repeat) {
		rest = strings.ReplaceAll(rest, repeat, ": ")
	}
	return head + rest
}

// Message is Error() without the code prefix: what a person reads.
func (e *Error) Message() string {
	s := e.Error()
	return strings.TrimPrefix(strings.TrimPrefix(s, string(e.Code)), ": ")
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a code sentinel of the same code, so
// errors.Is(err, outpost.ErrQuota) works through wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Code == e.Code
}

// Detail sets a detail and returns e, for chaining.
func (e *Error) Detail(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// DetailKeys returns the detail keys in sorted order.
func (e *Error) DetailKeys() []string {
	return slices.Sorted(maps.Keys(e.Details))
}

// CodeOf returns the code of err: "" for nil, the code of the first *Error
// in its chain, or Process for an error outpost did not classify.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Process
}

// UnavailableFault reports whether err records that the agent failed
// because its model service was unavailable (outage, overload, connection).
func UnavailableFault(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	v, _ := e.Details["unavailable"].(bool)
	return v
}

// Exit statuses of the outpost command, one per code. 0 is success, 1 an
// unclassified failure, 2 a usage error of the command line itself.
var exitCodes = map[Code]int{
	Configuration: 3,
	Refused:       4,
	Sandbox:       5,
	Bootstrap:     6,
	Conversation:  7,
	Process:       8,
	Quota:         9,
	Output:        10,
	Budget:        11,
	Timeout:       124,
	Cancelled:     130,
}

// ExitBusy is the exit status of a turn refused because another turn
// holds its conversation: code conversation with Details["busy"] true
// (docs/errors.md). Retrying later, or with --wait, may succeed.
const ExitBusy = 75

// ExitCode maps err to the outpost command's exit status: 0 for nil, the
// code's status for a coded error (see docs/errors.md; ExitBusy for a busy
// conversation), 1 otherwise.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Code == Conversation && e.Details["busy"] == true {
			return ExitBusy
		}
		if c, ok := exitCodes[e.Code]; ok {
			return c
		}
	}
	return 1
}

// Sentinels for errors.Is: errors.Is(err, outpost.ErrQuota).
var (
	ErrConfiguration = sentinel(Configuration)
	ErrRefused       = sentinel(Refused)
	ErrSandbox       = sentinel(Sandbox)
	ErrBootstrap     = sentinel(Bootstrap)
	ErrConversation  = sentinel(Conversation)
	ErrProcess       = sentinel(Process)
	ErrQuota         = sentinel(Quota)
	ErrOutput        = sentinel(Output)
	ErrBudget        = sentinel(Budget)
	ErrTimeout       = sentinel(Timeout)
	ErrCancelled     = sentinel(Cancelled)
)

func sentinel(c Code) *Error {
	return &Error{Code: c, Msg: "any " + string(c) + " error", sentinel: true}
}
