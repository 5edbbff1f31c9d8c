package claude

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
)

func goldenLines(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name+".stdout.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

func decodeCase(t *testing.T, name string) []harness.Event {
	t.Helper()
	d := newDecoder()
	var evs []harness.Event
	for _, l := range goldenLines(t, name) {
		evs = append(evs, d.decode(l)...)
	}
	return evs
}

func ofType(evs []harness.Event, typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func TestDecodeText(t *testing.T) {
	evs := decodeCase(t, "text")
	want := []harness.Event{
		{Type: harness.EventSession, Session: "cfe532c8-c139-441f-962b-cf2a8e41b1b1", Details: map[string]any{"model": "claude-opus-5-5", "cwd": "/tmp/outpost-golden/claude/text/work", "permission_mode": "default", "version": "2.1.332"}},
		{Type: harness.EventMessage, ID: "msg_fake_1:0", Text: "Hello from the fake model."},
		{Type: harness.EventFinished, Text: "Hello from the fake model.", Stop: "end_turn",
			Usage:   &harness.Usage{InputTokens: 12, OutputTokens: 7, Complete: true},
			Details: map[string]any{"subtype": "success", "terminal_reason": "completed", "num_turns": int64(1), "duration_ms": evs[2].Details["duration_ms"], "session_cost_usd": 0.000188}},
	}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDecodeTool(t *testing.T) {
	evs := decodeCase(t, "tool")
	calls, results := ofType(evs, harness.EventToolCall), ofType(evs, harness.EventToolResult)
	if len(calls) != 1 || calls[0].Tool.ID != "toolu_fake_1" || calls[0].Tool.Name != "Bash" || !strings.Contains(string(calls[0].Tool.Input), `"command":"echo hi > out.txt; echo hi"`) {
		t.Errorf("tool calls %+v", calls)
	}
	if calls[0].ID != "msg_fake_1:1" {
		t.Errorf("the tool_use is block 1 of msg_fake_1, got ID %q", calls[0].ID)
	}
	if len(results) != 1 || results[0].Tool.ID != "toolu_fake_1" || results[0].Tool.Output != "hi" || results[0].Tool.Error {
		t.Errorf("tool results %+v", results[0].Tool)
	}
	fin := ofType(evs, harness.EventFinished)
	if len(fin) != 1 || *fin[0].Usage != (harness.Usage{InputTokens: 24, OutputTokens: 14, Complete: true}) || fin[0].Details["num_turns"] != int64(2) {
		t.Errorf("finished %+v", fin)
	}
	denied := decodeCase(t, "tool_denied")
	n := ofType(denied, harness.EventNotice)
	if len(n) != 1 || n[0].Kind != "permission_denied" || n[0].Tool.Name != "Bash" || !strings.Contains(n[0].Text, "needs approval") {
		t.Errorf("denial notices %+v", n)
	}
	if r := ofType(denied, harness.EventToolResult); len(r) != 1 || !r[0].Tool.Error {
		t.Errorf("denied tool result %+v", r)
	}
	if f := ofType(denied, harness.EventFinished); len(f) != 1 || f[0].Details["permission_denials"] != 1 {
		t.Errorf("finished %+v", f)
	}
	if f := ofType(denied, harness.EventFailure); len(f) != 0 {
		t.Errorf("a permission denial is not a failure: %+v", f)
	}
}

func TestDecodeFailures(t *testing.T) {
	cases := []struct {
		name, kind, text string
		quota, unavail   bool
		details          map[string]any
	}{
		{"err_429", "rate_limit", "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit (fake)", true, false,
			map[string]any{"api_error_status": int64(429), "api_error_type": "rate_limit_error"}},
		{"err_usage_limit", "rate_limit", "API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.", true, false,
			map[string]any{"api_error_status": int64(429), "api_error_type": "rate_limit_error"}},
		{"err_usage_limit_oauth", "rate_limit", "You've hit your 5-hour limit · resets Jan 1, 2030, 12am (UTC)", true, false,
			map[string]any{"api_error_status": int64(429), "api_error_type": "rate_limit_error", "api_error": "usage_limit_reached", "resets_at": "2030-01-01T00:00:00Z", "rate_limit_type": "five_hour", "is_using_overage": false}},
		{"err_529", "server_error", "", false, true, map[string]any{"api_error_status": int64(529), "api_error_type": "overloaded_error"}},
		{"err_500", "server_error", "", false, true, map[string]any{"api_error_status": int64(500), "api_error_type": "api_error"}},
		{"err_stream_error", "server_error", "", false, true, map[string]any{"api_error_status": int64(529), "api_error_type": "overloaded_error"}},
		{"err_conn_refused", "server_error", "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)", false, true, map[string]any{"api_error": "connection_failed"}},
		{"err_401", "authentication_failed", "Invalid API key · Fix external API key", false, false, map[string]any{"api_error_status": int64(401), "api_error_type": "authentication_error"}},
		{"resume_unknown", "result_error", "No conversation found with session ID: 99999999-8888-4777-8666-555555555555", false, false, nil},
	}
	for _, c := range cases {
		evs := decodeCase(t, c.name)
		f := ofType(evs, harness.EventFailure)
		if len(f) != 1 {
			t.Errorf("%s: %d failures, want exactly 1 (the result repeats the synthetic line's)", c.name, len(f))
			continue
		}
		if f[0].Kind != c.kind || (c.text != "" && f[0].Text != c.text) {
			t.Errorf("%s: failure %q %q", c.name, f[0].Kind, f[0].Text)
		}
		if Quota(f[0].Text) != c.quota || Unavailable(f[0].Text) != c.unavail {
			t.Errorf("%s: Quota=%v Unavailable=%v for %q", c.name, Quota(f[0].Text), Unavailable(f[0].Text), f[0].Text)
		}
		for k, v := range c.details {
			if f[0].Details[k] != v {
				t.Errorf("%s: details[%s] = %v (%T), want %v", c.name, k, f[0].Details[k], f[0].Details[k], v)
			}
		}
		if len(ofType(evs, harness.EventFinished)) != 0 {
			t.Errorf("%s: a failed turn has no finished event", c.name)
		}
		if u := ofType(evs, harness.EventUsage); len(u) != 1 {
			t.Errorf("%s: usage events %+v", c.name, u)
		}
	}
	// Retries are notices with their facts.
	r := ofType(decodeCase(t, "err_529"), harness.EventNotice)
	if len(r) != 1 || r[0].Kind != "retry" || r[0].Details["attempt"] != int64(1) || r[0].Details["error_status"] != int64(529) || r[0].Details["error"] != "overloaded" {
		t.Errorf("retry notices %+v", r)
	}
	rl := ofType(decodeCase(t, "err_usage_limit_oauth"), harness.EventNotice)
	if len(rl) != 1 || rl[0].Kind != "rate_limit" || rl[0].Details["status"] != "rejected" || rl[0].Details["resets_at"] != "2030-01-01T00:00:00Z" {
		t.Errorf("rate limit notices %+v", rl)
	}
}

func TestDecodePartial(t *testing.T) {
	evs := decodeCase(t, "partial")
	var text, thinking strings.Builder
	ids := map[string]bool{}
	for _, e := range evs {
		if !e.Delta {
			continue
		}
		ids[string(e.Type)+" "+e.ID] = true
		switch e.Type {
		case harness.EventMessage:
			text.WriteString(e.Text)
		case harness.EventReasoning:
			thinking.WriteString(e.Text)
		}
	}
	if text.String() != "Hello from the fake model." || thinking.String() != "Let me think about this (fake)." {
		t.Errorf("deltas %q %q", text.String(), thinking.String())
	}
	if diff := cmp.Diff(map[string]bool{"reasoning msg_fake_1:0": true, "message msg_fake_1:1": true}, ids); diff != "" {
		t.Errorf("delta ids (-want +got):\n%s", diff)
	}
	// The complete blocks carry the same ids as their deltas.
	for _, e := range evs {
		if !e.Delta && (e.Type == harness.EventMessage || e.Type == harness.EventReasoning) && !ids[string(e.Type)+" "+e.ID] {
			t.Errorf("complete %s has id %q, unlike its deltas", e.Type, e.ID)
		}
	}
}

func TestDecodeStall(t *testing.T) {
	// The CLI printed its init line, then nothing: only the session event;
	// the engine's watchdog ends the turn.
	evs := decodeCase(t, "stall")
	if len(evs) != 1 || evs[0].Type != harness.EventSession {
		t.Errorf("events %+v", evs)
	}
}

// seqIDs returns a uuid generator 00000000-0000-4000-8000-00000000000N,
// N = 1, 2, ..., as record.sh's live_uuid cases used.
func seqIDs() func() (string, error) {
	n := 0
	return func() (string, error) {
		n++
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", n), nil
	}
}

// replayLive feeds a golden live case to a Live, sending the steering
// message right before line sendAt (1-based), and returns the events and
// the line numbers after which Done was true.
func replayLive(t *testing.T, name string, sendAt int) (evs []harness.Event, mode harness.Steer, doneAt []int) {
	t.Helper()
	lv, err := LiveInput(harness.Input{Prompt: "msg one"})
	if err != nil {
		t.Fatal(err)
	}
	l := lv.(*live)
	l.newID = seqIDs()
	if err := l.Begin(io.Discard); err != nil {
		t.Fatal(err)
	}
	for i, line := range goldenLines(t, name) {
		if i+1 == sendAt {
			if mode, err = l.Send(io.Discard, "msg two"); err != nil {
				t.Fatal(err)
			}
		}
		evs = append(evs, l.Decode(line, io.Discard)...)
		if l.Done() {
			doneAt = append(doneAt, i+1)
		}
	}
	return evs, mode, doneAt
}

func TestLiveInjected(t *testing.T) {
	// live_uuid_tool: 1 queued(1), 2 started(1), 3 init, 4 assistant text,
	// 5 tool_use, 6 queued(2: msg two, sent during the tool), 7-8 task, 9
	// tool_result, 10 started(2: within the turn), 11 assistant, 12
	// completed(2), 13 result, 14 completed(1).
	evs, mode, doneAt := replayLive(t, "live_uuid_tool", 6)
	if mode != harness.SteerInjected {
		t.Errorf("Send predicted %q during a tool call", mode)
	}
	var steer []harness.Event
	for _, e := range evs {
		if e.Kind == "steer" {
			steer = append(steer, e)
		}
	}
	if len(steer) != 1 || steer[0].Details["mode"] != "injected" || steer[0].Details["confirmed"] != true || steer[0].Details["index"] != 1 {
		t.Errorf("steer notices %+v", steer)
	}
	if len(doneAt) == 0 || doneAt[0] != 13 {
		t.Errorf("Done after lines %v, want from 13 (the result)", doneAt)
	}
	if n := len(ofType(evs, harness.EventFinished)); n != 1 {
		t.Errorf("%d finished events", n)
	}
}

func TestLiveQueued(t *testing.T) {
	// live_uuid_queued: 1 queued(1), 2 started(1), 3 init, 4 queued(2,
	// sent while the text streamed), 5 assistant, 6 result #0,
	// 7 completed(1), 8 started(2), 9 init, 10 assistant, 11 result #1,
	// 12 completed(2).
	evs, mode, doneAt := replayLive(t, "live_uuid_queued", 4)
	if mode != harness.SteerQueued {
		t.Errorf("Send predicted %q while text streamed", mode)
	}
	var steer []harness.Event
	for _, e := range evs {
		if e.Kind == "steer" {
			steer = append(steer, e)
		}
	}
	if len(steer) != 1 || steer[0].Details["mode"] != "queued" {
		t.Errorf("steer notices %+v", steer)
	}
	if len(doneAt) == 0 || doneAt[0] != 11 {
		t.Errorf("Done after lines %v, want from 11 (the second result)", doneAt)
	}
	fin := ofType(evs, harness.EventFinished)
	if len(fin) != 2 || *fin[1].Usage != (harness.Usage{InputTokens: 24, OutputTokens: 14, Complete: true}) {
		t.Errorf("finished %+v; the second must carry the sum of both results", fin)
	}
	if len(ofType(evs, harness.EventSession)) != 1 {
		t.Error("one session event for the repeated init lines")
	}
}

func TestLiveWithoutSteering(t *testing.T) {
	// Done comes with the result when nothing else was sent.
	_, _, doneAt := replayLive(t, "live_uuid_queued", -1)
	if len(doneAt) == 0 || doneAt[0] != 6 {
		t.Errorf("Done after lines %v, want from 6", doneAt)
	}
}

func TestLiveInterrupt(t *testing.T) {
	lv, err := LiveInput(harness.Input{Prompt: "msg one"})
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	if err := lv.Begin(&w); err != nil {
		t.Fatal(err)
	}
	w.Reset()
	if err := lv.Interrupt(&w); err != nil {
		t.Fatal(err)
	}
	if got := w.String(); got != `{"request":{"subtype":"interrupt"},"request_id":"outpost-interrupt-1","type":"control_request"}`+"\n" {
		t.Errorf("interrupt line %q", got)
	}
	// live_interrupt: the aborted result after an interrupt ends the turn
	// as interrupted, not failed.
	var evs []harness.Event
	for _, l := range goldenLines(t, "live_interrupt") {
		evs = append(evs, lv.Decode(l, io.Discard)...)
	}
	if f := ofType(evs, harness.EventFailure); len(f) != 0 {
		t.Errorf("failures %+v", f)
	}
	fin := ofType(evs, harness.EventFinished)
	if len(fin) != 2 || fin[0].Stop != "interrupted" || fin[1].Stop != "end_turn" {
		t.Errorf("finished %+v", fin)
	}
}
