package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
)

// exchange drives a client by hand: the agent's lines in, the client's
// messages out.
type exchange struct {
	t   *testing.T
	l   *client
	out bytes.Buffer
}

func newExchange(t *testing.T, in harness.Input) *exchange {
	t.Helper()
	if in.Workdir == "" {
		in.Workdir = "/work"
	}
	l, err := newClient(Config{Name: "x", Program: "agent", Args: []string{"--acp"}}, in)
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{t: t, l: l}
	if err := l.Begin(&x.out); err != nil {
		t.Fatal(err)
	}
	return x
}

// sent returns and forgets the client's messages so far.
func (x *exchange) sent() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(x.out.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			x.t.Fatalf("the client wrote a line that is not JSON: %q", line)
		}
		out = append(out, m)
	}
	x.out.Reset()
	return out
}

func (x *exchange) agent(line string) []harness.Event { return x.l.Decode([]byte(line), &x.out) }

// open answers initialize and session/new.
func (x *exchange) open() {
	x.agent(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{}}}`)
	x.agent(`{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}`)
	x.sent()
}

// TestBadInput: whatever the agent writes, the client neither panics nor
// hangs: lines that are not JSON-RPC are notices of kind protocol, requests
// for methods outpost does not offer get error -32601, answers to nothing
// and unknown updates are ignored, an error response to initialize ends
// the turn with a coded failure.
func TestBadInput(t *testing.T) {
	x := newExchange(t, harness.Input{Prompt: "hi"})
	x.open()
	for _, line := range []string{"not json", "null", "[1,2]", `{"jsonrpc":"2.0"}`, "\xff\xfe"} {
		evs := x.agent(line)
		if len(evs) != 1 || evs[0].Kind != "protocol" {
			t.Errorf("%q: %+v", line, evs)
		}
	}
	for _, line := range []string{`{"jsonrpc":"2.0","id":42,"result":{}}`, `{"id":{"a":1},"result":{}}`, `{"id":"x","error":{"code":1,"message":"m"}}`} {
		if evs := x.agent(line); len(evs) != 0 {
			t.Errorf("an answer to nothing, %s: %+v", line, evs)
		}
	}
	for _, m := range []string{"fs/read_text_file", "terminal/create", "no/such"} {
		evs := x.agent(`{"jsonrpc":"2.0","id":"r1","method":"` + m + `","params":{"path":"/etc/passwd"}}`)
		sent := x.sent()
		if len(evs) != 1 || evs[0].Kind != "unsupported" || len(sent) != 1 || sent[0]["id"] != "r1" || sent[0]["error"].(map[string]any)["code"] != float64(-32601) {
			t.Errorf("%s: events %+v, reply %+v", m, evs, sent)
		}
	}
	for _, u := range []string{`{"sessionUpdate":"no_such_kind"}`, `{"sessionUpdate":"tool_call"}`, `{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"x","mimeType":"image/png"}}`, `7`} {
		if evs := x.agent(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` + u + `}}`); len(evs) != 0 {
			t.Errorf("update %s: %+v", u, evs)
		}
	}
	if evs := x.agent(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"other","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}`); len(evs) != 0 {
		t.Errorf("another session's update: %+v", evs)
	}

	y := newExchange(t, harness.Input{Prompt: "hi"})
	evs := y.agent(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}`)
	if len(evs) != 1 || evs[0].Kind != harness.KindTurnFailed || !authTag(evs[0].Text) || !y.l.Done() {
		t.Errorf("initialize refused: %+v", evs)
	}
	z := newExchange(t, harness.Input{Prompt: "hi"})
	if evs := z.agent(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":2}}`); len(evs) != 1 || !strings.Contains(evs[0].Text, "version 2") {
		t.Errorf("another protocol version: %+v", evs)
	}
}

// TestSteerQueued: a message sent while a prompt runs waits for its end
// and is the next session/prompt on the same session; each prompt ends
// with a finished event, the usage adds up, and the turn is done after
// the last.
func TestSteerQueued(t *testing.T) {
	x := newExchange(t, harness.Input{Prompt: "first"})
	x.open()
	if mode, err := x.l.Send(&x.out, "second"); err != nil || mode != harness.SteerQueued || len(x.sent()) != 0 {
		t.Fatalf("send: %v %v", mode, err)
	}
	x.agent(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"one"}}}}`)
	evs := x.agent(`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12,"cachedReadTokens":4}}}`)
	sent := x.sent()
	if len(sent) != 1 || sent[0]["method"] != "session/prompt" || !strings.Contains(mustString(sent[0]["params"]), "second") || x.l.Done() {
		t.Fatalf("after the first prompt: sent %+v", sent)
	}
	if len(evs) != 2 || evs[1].Type != harness.EventFinished || evs[1].Text != "one" || *evs[1].Usage != (harness.Usage{InputTokens: 6, OutputTokens: 2, CacheReadTokens: 4, Complete: true}) {
		t.Errorf("first prompt's end: %+v", evs)
	}
	x.agent(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"two"}}}}`)
	evs = x.agent(`{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12}}}`)
	if !x.l.Done() || evs[len(evs)-1].Text != "two" || evs[len(evs)-1].Usage.InputTokens != 16 || evs[len(evs)-1].Usage.Complete {
		t.Errorf("second prompt's end: %+v", evs)
	}
	if _, err := x.l.Send(&x.out, "late"); err == nil {
		t.Error("a message after the turn was taken")
	}
}

// TestPermissionNoOption: a request with no option the policy can choose
// is cancelled, and said so; the tool call ends refused.
func TestPermissionNoOption(t *testing.T) {
	x := newExchange(t, harness.Input{Prompt: "hi", Options: map[string]string{OptionPermissions: "deny"}})
	x.open()
	evs := x.agent(`{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t","kind":"edit"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}}`)
	sent := x.sent()
	if len(evs) != 3 || evs[0].Kind != "permission_denied" || evs[2].Type != harness.EventToolResult || !evs[2].Tool.Error || evs[2].Tool.ID != "t" ||
		len(sent) != 1 || !strings.Contains(mustString(sent[0]["result"]), `"cancelled"`) {
		t.Errorf("events %+v, reply %+v", evs, sent)
	}
}

// TestOptions: unknown options and values are refused before anything
// runs.
func TestOptions(t *testing.T) {
	for _, o := range []map[string]string{{"nope": "1"}, {OptionPermissions: "write"}, {OptionSteer: "now"}} {
		if _, err := newClient(Config{Name: "x", Program: "p"}, harness.Input{Prompt: "hi", Options: o}); err == nil {
			t.Errorf("%v accepted", o)
		}
	}
	if _, err := newClient(Config{Name: "x", Program: "p", Args: []string{"--acp"}}, harness.Input{Prompt: "hi", ExtraArgs: []string{"--acp"}}); err == nil {
		t.Error("a reserved flag passed through")
	}
	if _, err := newClient(Config{Name: "x", Program: "p"}, harness.Input{Prompt: "hi", Model: "m"}); err == nil {
		t.Error("a model given to an agent that takes none")
	}
	// The agent's own options and its asking mode.
	c := Config{Name: "x", Program: "p", AskArgs: []string{"--ask"}, Options: map[string]func(string) ([]string, error){
		"mode": func(v string) ([]string, error) {
			if v != "a" {
				return nil, errors.New("not a")
			}
			return []string{"--mode", v}, nil
		}}}
	l, err := newClient(c, harness.Input{Prompt: "hi", Options: map[string]string{"mode": "a", OptionPermissions: "deny"}})
	if err != nil || strings.Join(l.Command().Args, " ") != "--ask --mode a" {
		t.Errorf("agent options: %v %v", err, l)
	}
	if _, err := newClient(c, harness.Input{Prompt: "hi", Options: map[string]string{"mode": "b"}}); err == nil || !strings.Contains(err.Error(), "option mode: not a") {
		t.Errorf("a bad value of the agent's option: %v", err)
	}
	if _, err := newClient(c, harness.Input{Prompt: "hi", Options: map[string]string{"nope": "1"}}); err == nil || !strings.Contains(err.Error(), "known: permissions, steer, mode") {
		t.Errorf("an unknown option: %v", err)
	}
}

func mustString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestProtocolUsage: the usage shapes agents send, read by totalTokens.
func TestProtocolUsage(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		name string
		u    sdk.Usage
		want harness.Usage
	}{
		{"apart (OpenCode)", sdk.Usage{InputTokens: 80, OutputTokens: 7, ThoughtTokens: n(3), CachedReadTokens: n(20), TotalTokens: 110}, harness.Usage{InputTokens: 80, OutputTokens: 10, CacheReadTokens: 20, Complete: true}},
		{"input holds the cache", sdk.Usage{InputTokens: 100, OutputTokens: 7, CachedReadTokens: n(20), TotalTokens: 107}, harness.Usage{InputTokens: 80, OutputTokens: 7, CacheReadTokens: 20, Complete: true}},
		{"no cache count", sdk.Usage{InputTokens: 100, OutputTokens: 7, TotalTokens: 107}, harness.Usage{InputTokens: 100, OutputTokens: 7}},
		{"does not add up", sdk.Usage{InputTokens: 1, OutputTokens: 1, CachedReadTokens: n(1), TotalTokens: 99}, harness.Usage{InputTokens: 1, OutputTokens: 1, CacheReadTokens: 1}},
	} {
		if got := protocolUsage(&c.u); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestMetaUsage: Qwen Code's per-call usage in an empty chunk's
// _meta.usage is the prompt's usage when its response has none.
func TestMetaUsage(t *testing.T) {
	x := newExchange(t, harness.Input{Prompt: "hi"})
	x.open()
	for range 2 {
		x.agent(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":""},"_meta":{"usage":{"inputTokens":100,"outputTokens":10,"totalTokens":110,"thoughtTokens":3,"cachedReadTokens":20}}}}}`)
	}
	evs := x.agent(`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}`)
	if fin := evs[len(evs)-1]; fin.Usage == nil || *fin.Usage != (harness.Usage{InputTokens: 160, OutputTokens: 20, CacheReadTokens: 40, Complete: true}) {
		t.Errorf("events %+v", evs)
	}
}

// TestPresetBootstrap: Config.Bootstrap names the adapter's own pin
// (claude-acp, codex-acp); without it the base preset's stays (a CLI that
// speaks ACP itself).
func TestPresetBootstrap(t *testing.T) {
	base := &harness.Harness{Name: "cli", Bootstrap: "cli",
		Request: func(harness.Input) (harness.Command, error) { return harness.Command{Path: "cli"}, nil }}
	if h := Preset(base, Config{Name: "cli-acp", Bootstrap: "cli-acp"}); h.Bootstrap != "cli-acp" || base.Bootstrap != "cli" {
		t.Errorf("with Config.Bootstrap: %q (base %q), want cli-acp (base cli)", h.Bootstrap, base.Bootstrap)
	}
	if h := Preset(base, Config{Name: "cli-acp"}); h.Bootstrap != "cli" {
		t.Errorf("without Config.Bootstrap: %q, want the base's cli", h.Bootstrap)
	}
}
