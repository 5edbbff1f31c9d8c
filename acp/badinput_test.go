package acp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/acp"
	"github.com/outposthq/outpost/conversation"
)

// raw is a client that writes lines and reads the agent's messages.
type raw struct {
	in   *io.PipeWriter
	msgs chan map[string]json.RawMessage
	done chan error
}

func serveRaw(t *testing.T, grace time.Duration) *raw {
	t.Helper()
	a, err := acp.New(acp.Options{Store: conversation.NewFS(t.TempDir()), Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	ar, cw := io.Pipe()
	cr, aw := io.Pipe()
	r := &raw{in: cw, msgs: make(chan map[string]json.RawMessage, 64), done: make(chan error, 1)}
	go func() { r.done <- a.Serve(context.Background(), ar, aw); aw.Close() }()
	go func() {
		br := bufio.NewReaderSize(cr, 1<<20)
		defer close(r.msgs)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				var m map[string]json.RawMessage
				if json.Unmarshal(line, &m) != nil {
					t.Errorf("the agent wrote a line that is not a JSON object: %.200q", line)
				}
				r.msgs <- m
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cw.Close()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("Serve did not return within a minute of the end of its input")
		}
	})
	return r
}

func (r *raw) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// call sends a request and returns its response, with the notifications
// that came before it.
func (r *raw) call(t *testing.T, id int, method, params string) (resp map[string]json.RawMessage, notes []map[string]json.RawMessage) {
	t.Helper()
	r.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	return r.await(t, fmt.Sprint(id))
}

// await reads messages until the response whose id is id.
func (r *raw) await(t *testing.T, id string) (map[string]json.RawMessage, []map[string]json.RawMessage) {
	t.Helper()
	var notes []map[string]json.RawMessage
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case m, ok := <-r.msgs:
			if !ok {
				t.Fatalf("the agent's output ended before the response %s", id)
			}
			if m["method"] != nil {
				notes = append(notes, m)
				continue
			}
			if string(m["id"]) == id {
				return m, notes
			}
			t.Fatalf("response %s, waiting for %s", m["id"], id)
		case <-deadline:
			t.Fatalf("no response %s within 5 minutes", id)
		}
	}
}

// rpcErr is a response's error: its code and outpost's code in data.
func rpcErr(t *testing.T, m map[string]json.RawMessage) (int, string) {
	t.Helper()
	var e struct {
		Code int `json:"code"`
		Data struct {
			Code string `json:"code"`
		} `json:"data"`
	}
	if m["error"] == nil || json.Unmarshal(m["error"], &e) != nil {
		t.Fatalf("want an error response, got %s", mustJSON(m))
	}
	return e.Code, e.Data.Code
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestBadInput sends what a broken client could: a line that is not JSON,
// a batch, an unknown method, a prompt of an unknown and of a closed
// session, a misspelt setting, a line over the bound, a prompt whose agent
// crashes midway, and an answer larger than any chunk. Each gets a
// JSON-RPC error with its code (and outpost's in data) or its whole
// answer, and the connection goes on: the session is usable afterwards,
// its conversation intact.
func TestBadInput(t *testing.T) {
	r := serveRaw(t, 0)
	work := t.TempDir()

	r.send(t, "this is not json")
	if resp, _ := r.await(t, "null"); mustCode(t, resp) != -32700 {
		t.Errorf("not JSON: %s", mustJSON(resp))
	}
	r.send(t, `[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`)
	if resp, _ := r.await(t, "null"); mustCode(t, resp) != -32600 {
		t.Errorf("batch: %s", mustJSON(resp))
	}
	if resp, _ := r.call(t, 2, "no/such/method", "{}"); mustCode(t, resp) != -32601 {
		t.Errorf("unknown method: %s", mustJSON(resp))
	}
	prompt := func(id int, sid, text string) (map[string]json.RawMessage, []map[string]json.RawMessage) {
		return r.call(t, id, "session/prompt", fmt.Sprintf(`{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}`, sid, text))
	}
	if resp, _ := prompt(3, "cnosuchsession", "hi"); !isErr(t, resp, -32002, "conversation") {
		t.Errorf("unknown session: %s", mustJSON(resp))
	}
	huge := fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"x","prompt":[{"type":"text","text":%q}]}}`, strings.Repeat("a", acp.DefaultMaxLine))
	r.send(t, huge)
	if resp, _ := r.await(t, "4"); mustCode(t, resp) != -32600 {
		t.Errorf("huge line: %s", mustJSON(resp))
	}
	if resp, _ := r.call(t, 5, "session/new", fmt.Sprintf(`{"cwd":%q,"mcpServers":[],"_meta":{"outpost":{"sandbx":"docker"}}}`, work)); !isErr(t, resp, -32602, "configuration") {
		t.Errorf("misspelt setting: %s", mustJSON(resp))
	}
	if resp, _ := r.call(t, 6, "session/new", `{"cwd":"relative","mcpServers":[]}`); !isErr(t, resp, -32602, "configuration") {
		t.Errorf("relative cwd: %s", mustJSON(resp))
	}

	resp, _ := r.call(t, 7, "session/new", fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, work))
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(resp["result"], &s) != nil || s.SessionID == "" {
		t.Fatalf("session/new: %s", mustJSON(resp))
	}
	if resp, _ := prompt(8, s.SessionID, "#crash"); !isErr(t, resp, -32603, "process") {
		t.Errorf("agent that exits midway: %s", mustJSON(resp))
	}
	resp, notes := prompt(9, s.SessionID, "#big")
	if resp["result"] == nil {
		t.Fatalf("prompt after a crash: %s", mustJSON(resp))
	}
	if n := chunked(t, notes); n < 8<<20 || !strings.Contains(mustJSON(notes[len(notes)-2]), "(turn 2)") {
		t.Errorf("the big answer: %d bytes in %d notifications; the turn after the crash must be the conversation's second", n, len(notes))
	}
	if resp, _ := r.call(t, 10, "session/close", fmt.Sprintf(`{"sessionId":%q}`, s.SessionID)); resp["result"] == nil {
		t.Fatalf("session/close: %s", mustJSON(resp))
	}
	if resp, _ := prompt(11, s.SessionID, "hi"); !isErr(t, resp, -32002, "conversation") {
		t.Errorf("closed session: %s", mustJSON(resp))
	}
}

func mustCode(t *testing.T, m map[string]json.RawMessage) int {
	t.Helper()
	c, _ := rpcErr(t, m)
	return c
}

func isErr(t *testing.T, m map[string]json.RawMessage, code int, outpostCode string) bool {
	t.Helper()
	c, oc := rpcErr(t, m)
	return c == code && oc == outpostCode
}

// chunked is the bytes of agent text the notifications carried, each
// within acp.MaxChunk.
func chunked(t *testing.T, notes []map[string]json.RawMessage) int {
	t.Helper()
	n := 0
	for _, m := range notes {
		var p struct {
			Update struct {
				SessionUpdate string `json:"sessionUpdate"`
				Content       struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"update"`
		}
		if json.Unmarshal(m["params"], &p) != nil {
			t.Fatalf("notification %.200s", mustJSON(m))
		}
		if p.Update.SessionUpdate == "agent_message_chunk" {
			if len(p.Update.Content.Text) > acp.MaxChunk {
				t.Errorf("a chunk of %d bytes", len(p.Update.Content.Text))
			}
			n += len(p.Update.Content.Text)
		}
	}
	return n
}

// TestEndOfInput: requests read before the input ended are all answered:
// a running turn within the grace period finishes (end_turn); past it, a
// turn is cancelled and its prompt answers cancelled; then Serve returns.
func TestEndOfInput(t *testing.T) {
	for _, c := range []struct {
		grace  time.Duration
		prompt string
		stop   string
	}{{acp.DefaultGrace, "#slow=3", "end_turn"}, {-1, "#slow=1000", "cancelled"}} {
		r := serveRaw(t, c.grace)
		work := t.TempDir()
		resp, _ := r.call(t, 1, "session/new", fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, work))
		var s struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(resp["result"], &s) != nil {
			t.Fatalf("session/new: %s", mustJSON(resp))
		}
		r.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}}`, s.SessionID, c.prompt))
		r.in.Close()
		resp, _ = r.await(t, "2")
		var p struct {
			StopReason string `json:"stopReason"`
		}
		if json.Unmarshal(resp["result"], &p) != nil || p.StopReason != c.stop {
			t.Errorf("grace %v: the prompt read before the end of input answered %s, want stop reason %s", c.grace, mustJSON(resp), c.stop)
		}
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Fatal("Serve did not return")
		}
		r.done <- nil // for the cleanup
	}
}
