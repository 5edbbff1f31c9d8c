package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// outcome is everything step 8 knows about how the agent's process ended.
// classify turns it into the turn's error.
type outcome struct {
	agent   string
	status  harness.ExitStatus
	waitErr error // the sandbox failing while the process ran
	// vanished: the provider says the sandbox is gone (asked once, and
	// only when the turn failed).
	vanished bool
	// ctxErr and ctxCause are the turn context's Err and Cause when it
	// ended (cancelled, caller deadline, turn Timeout).
	ctxErr, ctxCause error
	// stopReason is why the engine stopped the process: "inactivity",
	// "steer", "limit" or "".
	stopReason string
	seen       seen
	// quotaDetails are the preset's QuotaDetails of seen.quotaText.
	quotaDetails map[string]any
	// requiresFinished: the preset ends every successful turn with a
	// finished event (harness.RequiresFinishedEvent).
	requiresFinished bool
	stderrTail       []string // the last lines of standard error, redacted
}

// outcome gathers the outcome of the exited process. It asks whether the
// sandbox vanished, a round trip for some providers, only when the turn
// failed and the wait did not say so already.
func (s *stream) outcome(ctx context.Context, st harness.ExitStatus, waitErr error) outcome {
	e := s.e
	o := outcome{agent: e.h.Name, status: st, waitErr: waitErr, ctxErr: ctx.Err(), ctxCause: context.Cause(ctx), requiresFinished: e.h.RequiresFinishedEvent}
	o.vanished = sandbox.IsVanished(waitErr) || (waitErr == nil && !st.Success() && s.lease.Vanished(context.WithoutCancel(ctx)))
	o.stopReason, _ = s.stopReason.Load().(string)
	s.mu.Lock()
	o.seen = s.seen
	o.seen.failures = append([]string(nil), s.seen.failures...)
	s.mu.Unlock()
	if o.seen.quotaText != "" && e.h.QuotaDetails != nil {
		o.quotaDetails = e.h.QuotaDetails(o.seen.quotaText)
	}
	s.stderrMu.Lock()
	for _, l := range s.stderrTail {
		o.stderrTail = append(o.stderrTail, e.red.String(l))
	}
	s.stderrMu.Unlock()
	return o
}

// classify is step 8: the error a turn ends with, nil for success. It is
// a pure function of the outcome; the paths, in order: the sandbox failed
// or vanished, the turn was cancelled or timed out, the watchdog stopped a
// silent agent, a steering stop (not a failure), a spent budget, then on
// failure (non-zero exit or failure events): quota (only when the process
// failed: a quota text on exit 0 is a reported failure), misconfiguration,
// exit status, reported failure; last, a missing finished event. A text
// both Unavailable and Misconfigured match counts as an outage only
// (classifyText), and an outage keeps the code process (details.unavailable)
// over a misconfiguration text unless that text is the terminal error
// (seen.terminal).
func classify(o outcome) error {
	const op = "run"
	if o.waitErr != nil || o.vanished {
		return sandboxFailure(o)
	}
	if o.ctxErr != nil {
		code, msg := ctxCode(o.ctxErr, o.ctxCause)
		return o.details(&outpost.Error{Code: code, Op: op, Msg: msg})
	}
	switch o.stopReason {
	case "inactivity":
		// The agent stalled: nothing says its model service is down.
		return o.details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent printed nothing for too long and was stopped"}).
			Detail("stalled", true).Detail("inactivity", true)
	case "retrying":
		// It only retried, for longer than the preset's bound: an outage.
		msg := "the agent made no progress but retries for too long and was stopped"
		if o.seen.lastRetry != "" {
			msg += ": " + firstLine(o.seen.lastRetry)
		}
		return o.details(&outpost.Error{Code: outpost.Process, Op: op, Msg: msg}).
			Detail("unavailable", true).Detail("retrying", true)
	case "steer":
		return nil
	case "over":
		// The turn was over and the agent, its input closed, did not
		// exit: its signal is no failure; what the turn reported is.
		o.status = harness.ExitStatus{}
	}
	if o.seen.limit != nil {
		var limit any = true
		if v, ok := o.seen.limit.Details["limit"].(string); ok && v != "" {
			limit = v
		}
		return o.details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent went over its budget and was stopped: " + firstLine(o.seen.limit.Text)}).
			Detail("limit", limit)
	}
	failed := !o.status.Success() || len(o.seen.failures) > 0
	// A live protocol's error response ends the turn as a failed process
	// does (harness.KindTurnFailed), while the process itself exits 0.
	ended := !o.status.Success() || o.seen.turnFailed
	switch {
	case ended && o.seen.quotaText != "":
		return quotaFailure(o)
	case failed && o.seen.misconfigText != "" && (!o.seen.unavailable || o.seen.terminal().misconfigured):
		return o.details(&outpost.Error{Code: outpost.Configuration, Op: op, Msg: "the agent's credentials or configuration were refused: " + firstLine(o.seen.misconfigText)}).
			Detail("agent_reported", true)
	case failed:
		return processFailure(o)
	case o.requiresFinished && !o.seen.finished:
		return o.details(&outpost.Error{Code: outpost.Process, Op: op, Msg: "the agent exited without its final event"}).Detail("finished", false)
	}
	return nil
}

// sandboxFailure is the error of a sandbox that failed or vanished while
// the agent ran. Its cause is the driver's error.
func sandboxFailure(o outcome) error {
	cause := o.waitErr
	var oe *outpost.Error
	if errors.As(cause, &oe) && oe.Code == outpost.Sandbox {
		cause = oe.Err // the lease's coded error: keep its cause, not a second code
	}
	err := &outpost.Error{Code: outpost.Sandbox, Op: "run", Agent: o.agent, Msg: "the sandbox failed during the turn", Err: cause}
	if o.vanished {
		sandbox.MarkVanished(err, "the sandbox vanished during the turn")
	}
	return err
}

// quotaFailure is the error of an agent that hit a usage or rate limit.
func quotaFailure(o outcome) error {
	err := o.details(&outpost.Error{Code: outpost.Quota, Op: "run", Msg: "the agent hit a usage or rate limit: " + firstLine(o.seen.quotaText)})
	for k, v := range o.quotaDetails {
		err.Detail(k, v)
	}
	// The reset time the agent reported in the failure event's details is
	// exact; the text's is often to the minute at best.
	if r, ok := o.seen.quotaEvent["resets_at"].(string); ok && r != "" {
		err.Detail("resets_at", r)
	}
	return err
}

// processFailure is the error of an agent that exited non-zero or
// reported a failure.
func processFailure(o outcome) error {
	st, failures := o.status, o.seen.failures
	var msg string
	switch {
	case st.Success():
		msg = "the agent reported a failure: " + firstLine(failures[len(failures)-1])
	default:
		msg = fmt.Sprintf("the agent exited with status %d", st.Code)
		if st.Signal != "" {
			msg = "the agent was killed by " + st.Signal
		}
		if len(failures) > 0 {
			msg += ": " + firstLine(failures[len(failures)-1])
		} else if tail := lastLine(o.stderrTail); tail != "" {
			msg += ": " + tail
		}
	}
	err := o.details(&outpost.Error{Code: outpost.Process, Op: "run", Msg: msg})
	if o.seen.unavailable {
		err.Detail("unavailable", true)
	}
	return err
}

// details adds the agent, its exit and its last standard error to err.
func (o outcome) details(err *outpost.Error) *outpost.Error {
	err.Agent = o.agent
	err.Detail("exit_code", o.status.Code)
	if o.status.Signal != "" {
		err.Detail("signal", o.status.Signal)
	}
	if len(o.stderrTail) > 0 {
		err.Detail("stderr", strings.Join(o.stderrTail, "\n"))
	}
	return err
}

// ctxCode is the code and message of a turn whose context ended.
func ctxCode(err, cause error) (outpost.Code, string) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(cause, errTurnTimeout) {
		return outpost.Timeout, "deadline reached"
	}
	return outpost.Cancelled, "cancelled"
}

// lastLine is the first line of the last non-blank line of tail.
func lastLine(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(tail[i]); t != "" {
			return firstLine(t)
		}
	}
	return ""
}

// maxMessageText bounds the agent's text quoted in an error message.
const maxMessageText = 500

// firstLine is the first line of s, at most maxMessageText bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > maxMessageText {
		s = s[:maxMessageText] + "…"
	}
	return s
}
