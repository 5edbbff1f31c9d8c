package codex

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
)

// logLine is one line of an app-server recording: a message we sent (>>)
// or codex sent (<<).
type logLine struct {
	Dir string          `json:"dir"`
	Msg json.RawMessage `json:"msg"`
}

type rpc struct {
	ID     *int64          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// replay drives a live session with a recording: it feeds every message
// codex sent to Decode, in order, with each answer's id rewritten to the
// id the live session gave the same request; at the points where the
// recorder steered or interrupted it calls Send or Interrupt. It stops
// after the first turn/completed. It returns the events and the methods
// the live session wrote, in order.
func replay(t *testing.T, name string, in harness.Input) (evs []harness.Event, wrote []rpc, l *live) {
	t.Helper()
	hl, err := LiveInput(in)
	if err != nil {
		t.Fatal(err)
	}
	l = hl.(*live)
	var w bytes.Buffer
	recorded := map[int64]string{} // recorded request id -> method
	ours := map[string]int64{}     // method -> our latest id of it
	collect := func() {
		for _, line := range bytes.Split(w.Bytes(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m rpc
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("wrote a line that is not JSON: %q", line)
			}
			if m.ID != nil && m.Method != "" {
				ours[m.Method] = *m.ID
			}
			wrote = append(wrote, m)
		}
		w.Reset()
	}
	if err := l.Begin(&w); err != nil {
		t.Fatal(err)
	}
	collect()
	for _, raw := range readLines(t, name+".jsonl") {
		var ll logLine
		if err := json.Unmarshal(raw, &ll); err != nil {
			t.Fatal(err)
		}
		var m rpc
		json.Unmarshal(ll.Msg, &m)
		if ll.Dir == ">>" {
			if m.ID != nil {
				recorded[*m.ID] = m.Method
			}
			var p struct {
				Input []struct{ Text string } `json:"input"`
			}
			json.Unmarshal(m.Params, &p)
			switch {
			case m.Method == "turn/steer":
				if _, err := l.Send(&w, p.Input[0].Text); err != nil && !l.Done() {
					t.Fatalf("Send: %v", err)
				}
			case m.Method == "turn/interrupt":
				if err := l.Interrupt(&w); err != nil {
					t.Fatal(err)
				}
			}
			collect()
			continue
		}
		line := []byte(ll.Msg)
		if m.ID != nil && m.Method == "" {
			method := recorded[*m.ID]
			id, ok := ours[method]
			if !ok && strings.HasPrefix(method, "thread/") {
				for _, alt := range []string{"thread/start", "thread/resume", "thread/fork"} {
					if id, ok = ours[alt]; ok {
						break
					}
				}
			}
			if !ok {
				continue // an answer to a request this session never made
			}
			var o map[string]json.RawMessage
			json.Unmarshal(ll.Msg, &o)
			o["id"], _ = json.Marshal(id)
			line, _ = json.Marshal(o)
		}
		evs = append(evs, l.Decode(line, &w)...)
		collect()
		if m.Method == "turn/completed" {
			break
		}
	}
	return evs, wrote, l
}

func methods(msgs []rpc) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Method)
	}
	return out
}

func TestAppServerText(t *testing.T) {
	evs, wrote, l := replay(t, "appserver-text", harness.Input{Prompt: "Say hello", Workdir: "/work", Model: "gpt-5.5", Options: map[string]string{OptionSandbox: "workspace-write"}})
	if got := strings.Join(methods(wrote), ","); got != "initialize,initialized,thread/start,turn/start" {
		t.Errorf("wrote %s", got)
	}
	var start map[string]any
	json.Unmarshal(wrote[2].Params, &start)
	if start["approvalPolicy"] != "never" || start["sandbox"] != "workspace-write" || start["cwd"] != "/work" || start["model"] != "gpt-5.5" {
		t.Errorf("thread/start params %v", start)
	}
	if s := one(t, evs, harness.EventSession); s.Session != "01a228e2-fd28-7e60-9c87-96b56fb447f9" {
		t.Errorf("session %+v", s)
	}
	var deltas string
	for _, e := range only(t, evs, harness.EventMessage) {
		if e.Delta {
			deltas += e.Text
		} else if e.Text != "Hello from the fake model." {
			t.Errorf("message %q", e.Text)
		}
	}
	if deltas != "Hello from the fake model." {
		t.Errorf("deltas %q", deltas)
	}
	fin := one(t, evs, harness.EventFinished)
	if fin.Text != "Hello from the fake model." || fin.Usage == nil || *fin.Usage != oneResponse {
		t.Errorf("finished %+v usage %+v", fin, fin.Usage)
	}
	if u := one(t, evs, harness.EventUsage); *u.Usage != oneResponse {
		t.Errorf("usage %+v", u.Usage)
	}
	if !l.Done() {
		t.Error("not done after turn/completed")
	}
	if _, err := l.Send(&bytes.Buffer{}, "late"); err == nil {
		t.Error("Send after the turn took the message")
	}
}

func TestAppServerSteer(t *testing.T) {
	evs, wrote, _ := replay(t, "appserver-steer", harness.Input{Prompt: "Count slowly FAKE_SLOW"})
	var steer *rpc
	for i := range wrote {
		if wrote[i].Method == "turn/steer" {
			steer = &wrote[i]
		}
	}
	if steer == nil {
		t.Fatalf("no turn/steer in %v", methods(wrote))
	}
	var p map[string]any
	json.Unmarshal(steer.Params, &p)
	if p["expectedTurnId"] != "01a228e7-dc33-7082-bc52-51cb9266228c" || p["threadId"] != "01a228e7-dc1e-7651-9573-a39b828eaddc" {
		t.Errorf("steer params %v", p)
	}
	// The partial message of the abandoned stream never completes; the
	// final one is the answer after the steer.
	msgs := only(t, evs, harness.EventMessage)
	var full []string
	for _, m := range msgs {
		if !m.Delta {
			full = append(full, m.Text)
		}
	}
	if len(full) != 1 || full[0] != "Hello from the fake model." {
		t.Errorf("complete messages %q", full)
	}
	if fin := one(t, evs, harness.EventFinished); fin.Text != "Hello from the fake model." {
		t.Errorf("finished %+v", fin)
	}
}

// TestAppServerSteerBeforeTurn: a message sent before turn/start answered
// waits for the turn's id.
func TestAppServerSteerBeforeTurn(t *testing.T) {
	l, _ := LiveInput(harness.Input{Prompt: "p"})
	var w bytes.Buffer
	l.Begin(&w)
	if mode, err := l.Send(&w, "early"); err != nil || mode != harness.SteerInjected {
		t.Fatalf("Send: %v %v", mode, err)
	}
	w.Reset()
	l.Decode([]byte(`{"id":1,"result":{}}`), &w)
	l.Decode([]byte(`{"id":2,"result":{"thread":{"id":"01a228e7-dc1e-7651-9573-a39b828eaddc"}}}`), &w)
	if strings.Contains(w.String(), "turn/steer") {
		t.Fatal("steered before the turn had an id")
	}
	w.Reset()
	l.Decode([]byte(`{"id":3,"result":{"turn":{"id":"01a228e7-dc33-7082-bc52-51cb9266228c"}}}`), &w)
	if !strings.Contains(w.String(), `"method":"turn/steer"`) || !strings.Contains(w.String(), `"expectedTurnId":"01a228e7-dc33-7082-bc52-51cb9266228c"`) || !strings.Contains(w.String(), "early") {
		t.Errorf("after turn/start: %s", w.String())
	}
}

func TestAppServerInterrupt(t *testing.T) {
	evs, wrote, l := replay(t, "appserver-interrupt", harness.Input{Prompt: "Count slowly FAKE_SLOW"})
	if !strings.Contains(strings.Join(methods(wrote), ","), "turn/interrupt") {
		t.Errorf("wrote %v", methods(wrote))
	}
	f := one(t, evs, harness.EventFailure)
	if f.Kind != "interrupted" || !l.Done() {
		t.Errorf("failure %+v done %v", f, l.Done())
	}
	if len(only(t, evs, harness.EventFinished)) != 0 {
		t.Error("an interrupted turn finished")
	}
}

func TestAppServerErrors(t *testing.T) {
	evs, _, _ := replay(t, "appserver-error", harness.Input{Prompt: "x FAKE_500"})
	var notices []harness.Event
	for _, n := range only(t, evs, harness.EventNotice) {
		if n.Kind != "warning" { // the bubblewrap configWarning
			notices = append(notices, n)
		}
	}
	retry := one(t, notices, harness.EventNotice)
	if retry.Kind != "retry" || retry.Details["codex_error_info"] != "responseStreamDisconnected" || Quota(retry.Text) || Unavailable(retry.Text) {
		t.Errorf("retry %+v", retry)
	}
	f := one(t, evs, harness.EventFailure) // error notification and turn/completed failed are one failure
	if !strings.HasSuffix(f.Text, "[internalServerError]") || !Unavailable(f.Text) || Quota(f.Text) || f.Details["codex_error_info"] != "internalServerError" {
		t.Errorf("failure %+v", f)
	}
	for text, want := range map[string][2]bool{
		"You’ve hit your usage limit. Try again later. [usageLimitExceeded]":                   {true, false},
		"Quota exceeded soon [usageLimitExceeded]":                                             {true, false},
		"exceeded retry limit [responseTooManyFailedAttempts 429]":                             {true, false},
		"unexpected status 401 Unauthorized: Incorrect API key [httpConnectionFailed 401]":     {false, false},
		"Reconnecting... waiting for network (Connection failed) [responseStreamDisconnected]": {false, false},
		"something [responseStreamDisconnected]":                                               {false, true},
		"something [httpConnectionFailed 502]":                                                 {false, true},
		"overloaded [serverOverloaded]":                                                        {false, true},
	} {
		if Quota(text) != want[0] || Unavailable(text) != want[1] {
			t.Errorf("%q: Quota %v Unavailable %v, want %v", text, Quota(text), Unavailable(text), want)
		}
	}
}

func TestAppServerResumeAndFork(t *testing.T) {
	const id = "01a228e2-f48c-7241-85ef-0914c664ddb7"
	for _, c := range []struct {
		in     harness.Input
		method string
	}{
		{harness.Input{Prompt: "p", Conversation: id}, "thread/resume"},
		{harness.Input{Prompt: "p", Conversation: id, Fork: true}, "thread/fork"},
	} {
		l, err := LiveInput(c.in)
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		l.Begin(&w)
		w.Reset()
		l.Decode([]byte(`{"id":1,"result":{}}`), &w)
		if !strings.Contains(w.String(), `"method":"`+c.method+`"`) || !strings.Contains(w.String(), `"threadId":"`+id+`"`) {
			t.Errorf("%s: wrote %s", c.method, w.String())
		}
		evs := l.Decode([]byte(`{"id":2,"error":{"code":-32600,"message":"no rollout found"}}`), &w)
		if f := one(t, evs, harness.EventFailure); !strings.Contains(f.Text, "no rollout found") || !l.Done() {
			t.Errorf("%s failure %+v", c.method, f)
		}
	}
}

func TestAppServerApprovals(t *testing.T) {
	l, _ := LiveInput(harness.Input{Prompt: "p"})
	var w bytes.Buffer
	evs := l.Decode([]byte(`{"id":"a1","method":"item/commandExecution/requestApproval","params":{}}`), &w)
	if !strings.Contains(w.String(), `{"id":"a1","result":{"decision":"decline"}}`) || len(evs) != 1 || evs[0].Kind != "permission_denied" {
		t.Errorf("wrote %s events %+v", w.String(), evs)
	}
	w.Reset()
	l.Decode([]byte(`{"id":7,"method":"attestation/generate","params":{}}`), &w)
	if !strings.Contains(w.String(), `"error":{"code":-32601`) || !strings.Contains(w.String(), `"id":7`) {
		t.Errorf("wrote %s", w.String())
	}
}

func TestLiveInputArgs(t *testing.T) {
	l, err := LiveInput(harness.Input{Prompt: "p", Home: "/h", ExtraArgs: []string{"-c", "x=1", "--enable", "f"}, Options: map[string]string{OptionStreamMaxRetries: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := l.Command()
	want := "app-server -c model_providers.outpost.name=\"outpost\" -c model_providers.outpost.stream_max_retries=0 -c x=1 --enable f"
	if strings.Join(cmd.Args, " ") != want || !cmd.KeepStdin || cmd.Env["CODEX_HOME"] != "/h/.codex" {
		t.Errorf("command %q %+v", strings.Join(cmd.Args, " "), cmd)
	}
	if _, err := LiveInput(harness.Input{Prompt: "p", ExtraArgs: []string{"--color", "never"}}); err == nil {
		t.Error("an exec flag was accepted")
	}
}
