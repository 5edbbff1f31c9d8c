package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestClassify covers every path of the turn's classification (step 8),
// a pure function of the outcome.
func TestClassify(t *testing.T) {
	errGone := errors.New("container gone")
	errDropped := fmt.Errorf("ssh: %w", driver.ErrDisconnected)
	exit1 := harness.ExitStatus{Code: 1}
	killed := harness.ExitStatus{Code: -1, Signal: "SIGKILL"}
	tail := []string{"starting", "boom: model said no", ""}
	type want struct {
		Code    outpost.Code
		Msg     string
		Details map[string]any
		Cause   error
	}
	cases := []struct {
		name string
		o    outcome
		want *want // nil: success
	}{
		{"success", outcome{}, nil},
		{"success with the finished event required", outcome{requiresFinished: true, seen: seen{finished: true}}, nil},
		{"missing finished event", outcome{requiresFinished: true},
			&want{Code: outpost.Process, Msg: "the agent exited without its final event", Details: map[string]any{"exit_code": 0, "finished": false}}},
		{"sandbox failed", outcome{waitErr: errGone, status: exit1},
			&want{Code: outpost.Sandbox, Msg: "the sandbox failed during the turn", Cause: errGone}},
		{"vanished (wait error from the lease)", outcome{waitErr: &outpost.Error{Code: outpost.Sandbox, Op: "wait", Err: errGone}, vanished: true},
			&want{Code: outpost.Sandbox, Msg: "the sandbox vanished during the turn", Details: map[string]any{"vanished": true}, Cause: errGone}},
		{"disconnected (a remote host's connection dropped)", outcome{waitErr: &outpost.Error{Code: outpost.Sandbox, Op: "wait", Err: errDropped}, vanished: true},
			&want{Code: outpost.Sandbox, Msg: "the sandbox vanished during the turn", Details: map[string]any{"vanished": true, "disconnected": true}, Cause: errDropped}},
		{"vanished (non-zero exit)", outcome{status: killed, vanished: true, seen: seen{failures: []string{"x"}}},
			&want{Code: outpost.Sandbox, Msg: "the sandbox vanished during the turn", Details: map[string]any{"vanished": true}}},
		{"cancel", outcome{status: killed, ctxErr: context.Canceled, ctxCause: context.Canceled, stderrTail: tail},
			&want{Code: outpost.Cancelled, Msg: "cancelled", Details: map[string]any{"exit_code": -1, "signal": "SIGKILL", "stderr": "starting\nboom: model said no\n"}}},
		{"timeout (caller's deadline)", outcome{status: exit1, ctxErr: context.DeadlineExceeded, ctxCause: context.DeadlineExceeded},
			&want{Code: outpost.Timeout, Msg: "deadline reached", Details: map[string]any{"exit_code": 1}}},
		{"timeout (turn's Timeout)", outcome{status: exit1, ctxErr: context.Canceled, ctxCause: errTurnTimeout},
			&want{Code: outpost.Timeout, Msg: "deadline reached", Details: map[string]any{"exit_code": 1}}},
		// Rule 8: the watchdog reports a stalled agent, not an outage.
		{"watchdog", outcome{status: exit1, stopReason: "inactivity"},
			&want{Code: outpost.Process, Msg: "the agent printed nothing for too long and was stopped", Details: map[string]any{"exit_code": 1, "stalled": true, "inactivity": true}}},
		// Rule 8: a turn that only retried past the bound is an outage.
		{"retry bound", outcome{status: killed, stopReason: "retrying", seen: seen{lastRetry: "Reconnecting... waiting for network"}},
			&want{Code: outpost.Process, Msg: "the agent made no progress but retries for too long and was stopped: Reconnecting... waiting for network", Details: map[string]any{"exit_code": -1, "signal": "SIGKILL", "unavailable": true, "retrying": true}}},
		{"quota over misconfigured and unavailable", outcome{status: exit1, seen: seen{failures: []string{"x"}, quotaText: "quota", misconfigText: "bad key", unavailable: true}},
			&want{Code: outpost.Quota, Msg: "the agent hit a usage or rate limit: quota", Details: map[string]any{"exit_code": 1}}},
		// Rule 8: an outage keeps process over another text's
		// misconfiguration, unless that text is the terminal error.
		{"outage over another text's misconfiguration", outcome{status: exit1, seen: seen{misconfigText: "bad key", unavailable: true}},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1", Details: map[string]any{"exit_code": 1, "unavailable": true}}},
		{"outage over an earlier failure's misconfiguration", outcome{status: exit1, seen: seen{failures: []string{"bad key", "503 overloaded"}, misconfigText: "bad key", unavailable: true, lastFailure: textClass{unavailable: true}}},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1: 503 overloaded", Details: map[string]any{"exit_code": 1, "unavailable": true}}},
		{"outage over a stderr misconfiguration after the last failure event", outcome{status: exit1, seen: seen{failures: []string{"503 overloaded"}, misconfigText: "bad key", unavailable: true, lastFailure: textClass{unavailable: true}, lastStderr: textClass{misconfigured: true}}},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1: 503 overloaded", Details: map[string]any{"exit_code": 1, "unavailable": true}}},
		{"misconfigured terminal failure over an earlier outage", outcome{status: exit1, seen: seen{failures: []string{"503 overloaded", "bad key"}, misconfigText: "bad key", unavailable: true, lastFailure: textClass{misconfigured: true}}},
			&want{Code: outpost.Configuration, Msg: "the agent's credentials or configuration were refused: bad key", Details: map[string]any{"exit_code": 1, "agent_reported": true}}},
		{"misconfigured terminal stderr line over an earlier outage", outcome{status: exit1, seen: seen{misconfigText: "bad key", unavailable: true, lastStderr: textClass{misconfigured: true}}, stderrTail: []string{"503 overloaded", "bad key", ""}},
			&want{Code: outpost.Configuration, Msg: "the agent's credentials or configuration were refused: bad key", Details: map[string]any{"exit_code": 1, "agent_reported": true, "stderr": "503 overloaded\nbad key\n"}}},
		{"steer", outcome{status: exit1, stopReason: "steer", seen: seen{failures: []string{"interrupted"}}}, nil},
		{"limit", outcome{status: exit1, stopReason: "limit", seen: seen{failures: []string{"over"}, limit: &harness.Event{Text: "over budget\nmore", Details: map[string]any{"limit": "max_turns"}}}},
			&want{Code: outpost.Process, Msg: "the agent went over its budget and was stopped: over budget", Details: map[string]any{"exit_code": 1, "limit": "max_turns"}}},
		{"limit without a name", outcome{seen: seen{failures: []string{"over"}, limit: &harness.Event{Text: "over"}}},
			&want{Code: outpost.Process, Msg: "the agent went over its budget and was stopped: over", Details: map[string]any{"exit_code": 0, "limit": true}}},
		{"quota", outcome{status: exit1, seen: seen{failures: []string{"rate limited"}, quotaText: "rate limited", quotaEvent: map[string]any{"resets_at": "2026-12-01T12:00:00Z"}},
			quotaDetails: map[string]any{"resets_at": "later", "kind": "rate"}},
			&want{Code: outpost.Quota, Msg: "the agent hit a usage or rate limit: rate limited", Details: map[string]any{"exit_code": 1, "resets_at": "2026-12-01T12:00:00Z", "kind": "rate"}}},
		{"quota text on a successful turn", outcome{seen: seen{quotaText: "usage at 90%"}}, nil},
		// Rule: quota only when the process then fails.
		{"quota text in a failure event on exit 0", outcome{seen: seen{failures: []string{"usage limit reached"}, quotaText: "usage limit reached", finished: true}},
			&want{Code: outpost.Process, Msg: "the agent reported a failure: usage limit reached", Details: map[string]any{"exit_code": 0}}},
		{"quota text in a failure event, killed", outcome{status: killed, seen: seen{failures: []string{"usage limit reached"}, quotaText: "usage limit reached"}},
			&want{Code: outpost.Quota, Msg: "the agent hit a usage or rate limit: usage limit reached", Details: map[string]any{"exit_code": -1, "signal": "SIGKILL"}}},
		{"misconfigured", outcome{status: exit1, seen: seen{misconfigText: "invalid api key\ntrace"}},
			&want{Code: outpost.Configuration, Msg: "the agent's credentials or configuration were refused: invalid api key", Details: map[string]any{"exit_code": 1, "agent_reported": true}}},
		{"exit status with the last failure", outcome{status: exit1, seen: seen{failures: []string{"first", "last"}}},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1: last", Details: map[string]any{"exit_code": 1}}},
		{"exit status with the stderr tail", outcome{status: exit1, stderrTail: tail},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1: boom: model said no", Details: map[string]any{"exit_code": 1, "stderr": "starting\nboom: model said no\n"}}},
		{"killed by a signal", outcome{status: killed},
			&want{Code: outpost.Process, Msg: "the agent was killed by SIGKILL", Details: map[string]any{"exit_code": -1, "signal": "SIGKILL"}}},
		{"unavailable", outcome{status: exit1, seen: seen{unavailable: true, failures: []string{"503 overloaded"}}},
			&want{Code: outpost.Process, Msg: "the agent exited with status 1: 503 overloaded", Details: map[string]any{"exit_code": 1, "unavailable": true}}},
		{"failure events on exit 0", outcome{seen: seen{failures: []string{"tool crashed"}, finished: true}},
			&want{Code: outpost.Process, Msg: "the agent reported a failure: tool crashed", Details: map[string]any{"exit_code": 0}}},
		{"failure events on exit 0, unavailable", outcome{seen: seen{failures: []string{"connection refused"}, unavailable: true}},
			&want{Code: outpost.Process, Msg: "the agent reported a failure: connection refused", Details: map[string]any{"exit_code": 0, "unavailable": true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.agent = "echo"
			err := classify(tc.o)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("classify = %v, want nil", err)
				}
				return
			}
			var oe *outpost.Error
			if !errors.As(err, &oe) {
				t.Fatalf("classify = %v, want an *outpost.Error", err)
			}
			got := &want{Code: oe.Code, Msg: oe.Msg, Details: oe.Details, Cause: oe.Err}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("classify (-want +got):\n%s", diff)
			}
			if oe.Agent != "echo" || oe.Op != "run" {
				t.Errorf("agent %q op %q, want echo and run", oe.Agent, oe.Op)
			}
			if s := fmt.Sprint(err); s == "" {
				t.Error("empty error text")
			}
		})
	}
}

// TestClassifyText is the precedence of the preset's patterns on one text
// (rule 8): an outage text that Misconfigured also matches stays an outage
// (details.unavailable, code process), never configuration.
func TestClassifyText(t *testing.T) {
	h := &harness.Harness{
		Quota:         func(s string) bool { return strings.Contains(s, "quota") },
		Unavailable:   func(s string) bool { return strings.Contains(s, "503") },
		Misconfigured: func(s string) bool { return strings.Contains(s, "403") || strings.Contains(s, "key") },
	}
	for _, c := range []struct {
		text string
		want textClass
	}{
		{"fine", textClass{}},
		{"quota reached", textClass{quota: true}},
		{"503 overloaded", textClass{unavailable: true}},
		{"invalid key", textClass{misconfigured: true}},
		{"503 from the proxy: 403 key rejected", textClass{unavailable: true}},
		{"quota: 503", textClass{quota: true, unavailable: true}},
		{"quota for this key", textClass{quota: true, misconfigured: true}},
	} {
		if got := classifyText(h, c.text); got != c.want {
			t.Errorf("classifyText(%q) = %+v, want %+v", c.text, got, c.want)
		}
	}
	if got := classifyText(&harness.Harness{}, "503 key quota"); got != (textClass{}) {
		t.Errorf("a preset without patterns: %+v", got)
	}
	// Through the turn's record: both texts seen, the outage keeps the code.
	s := &stream{e: &turnRun{h: h, o: &RunOptions{}, red: credentials.NewRedactor()}}
	s.note("503 from the proxy: 403 key rejected")
	err := classify(outcome{agent: "x", status: harness.ExitStatus{Code: 1}, seen: s.seen})
	if outpost.CodeOf(err) != outpost.Process || !outpost.UnavailableFault(err) {
		t.Errorf("outage text matched by both: %v (unavailable %v), want process with details.unavailable", err, outpost.UnavailableFault(err))
	}
}

// TestNoteClipsLongTexts: a preset's hooks get at most
// harness.MaxClassifiedText of one failure text (its start and end), so
// a message at the end of a 4 MiB stderr line is still found and the
// patterns never scan the whole line.
func TestNoteClipsLongTexts(t *testing.T) {
	longest := 0
	h := &harness.Harness{Quota: func(s string) bool {
		longest = max(longest, len(s))
		return strings.Contains(s, "usage limit reached")
	}}
	s := &stream{e: &turnRun{h: h, o: &RunOptions{}, red: credentials.NewRedactor()}}
	pad := strings.Repeat("x", 4<<20)
	if c := s.note(pad + " usage limit reached"); !c.quota {
		t.Error("a quota message at the end of a long line was not found")
	}
	if longest > harness.MaxClassifiedText+1 || len(s.seen.quotaText) > harness.MaxClassifiedText+1 {
		t.Errorf("the hook got %d bytes and the turn kept %d, want at most %d", longest, len(s.seen.quotaText), harness.MaxClassifiedText+1)
	}
}

// TestTerminalText: the stream records what the patterns said of the last
// failure event and of the last non-blank line of standard error, and the
// terminal one of them decides between an outage and a misconfiguration.
func TestTerminalText(t *testing.T) {
	h := &harness.Harness{
		Unavailable:   func(s string) bool { return strings.Contains(s, "503") },
		Misconfigured: func(s string) bool { return strings.Contains(s, "key") },
	}
	for _, c := range []struct {
		name        string
		failures    []string
		stderr      string
		code        outpost.Code
		unavailable bool
	}{
		{"stderr: outage, then a refused key", nil, "503 overloaded\ninvalid key\n\n", outpost.Configuration, false},
		{"stderr: refused key, then an outage", nil, "invalid key\n503 overloaded\n", outpost.Process, true},
		{"events: outage, then a refused key", []string{"503 overloaded", "invalid key"}, "", outpost.Configuration, false},
		{"events: refused key, then an outage", []string{"invalid key", "503 overloaded"}, "invalid key\n", outpost.Process, true},
		{"events: refused key; stderr: outage", []string{"invalid key"}, "503 overloaded\n", outpost.Configuration, false},
		{"no outage: a refused key anywhere", []string{"invalid key", "crashed"}, "", outpost.Configuration, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &stream{e: &turnRun{h: h, o: &RunOptions{}, red: credentials.NewRedactor()}}
			for _, f := range c.failures {
				s.record(harness.Event{Type: harness.EventFailure, Text: f})
			}
			s.pumpStderr(strings.NewReader(c.stderr))
			err := classify(outcome{agent: "x", status: harness.ExitStatus{Code: 1}, seen: s.seen, stderrTail: s.stderrTail})
			if outpost.CodeOf(err) != c.code || outpost.UnavailableFault(err) != c.unavailable {
				t.Errorf("%v (unavailable %v), want %s (unavailable %v)", err, outpost.UnavailableFault(err), c.code, c.unavailable)
			}
		})
	}
}

// TestTurnFailedQuota: a live protocol's error response (a failure of
// kind turn_failed) ends the turn as a failed process does, so a quota
// text in it is quota although the process exits 0; the same text in an
// ordinary failure event on exit 0 stays a reported failure.
func TestTurnFailedQuota(t *testing.T) {
	h := &harness.Harness{Quota: func(s string) bool { return strings.Contains(s, "429") }}
	for _, c := range []struct {
		kind string
		code outpost.Code
	}{{harness.KindTurnFailed, outpost.Quota}, {"", outpost.Process}} {
		s := &stream{e: &turnRun{h: h, o: &RunOptions{}, red: credentials.NewRedactor()}}
		s.record(harness.Event{Type: harness.EventFailure, Kind: c.kind, Text: "session/prompt failed: 429 Resource has been exhausted"})
		err := classify(outcome{agent: "x", seen: s.seen})
		if outpost.CodeOf(err) != c.code {
			t.Errorf("kind %q: %v, want %s", c.kind, err, c.code)
		}
	}
}
