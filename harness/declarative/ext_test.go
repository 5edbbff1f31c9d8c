package declarative_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/harnesstest"
)

// ext is a file using the fields for tool events, several events per
// line, summed usage, native schemas, configuration and resume files,
// and storage by working directory.
const ext = `{
  "kind": "cli", "name": "ext", "program": "ext",
  "args": ["{model_args}", "{session_args}", "--", "{prompt}"],
  "schema_args": ["--schema", "{schema}"],
  "session": "output",
  "resume_args": ["--resume", "{session}"],
  "resume_files": [{"path": ".ext/{workdir_slug}/{session}.json", "content": {"dir": "{workdir}", "n": 1}}],
  "pass_variables": ["EXT_URL"],
  "files": [{"path": ".ext/config.json", "merge": "json", "content": {"url": "{env:EXT_URL}"}}],
  "endpoint": {"api": "openai-chat", "secret": "EXT_KEY", "base_url": "EXT_URL"},
  "output": {"format": "jsonl", "events": [
    {"when": {"type": "msg"}, "event": "session", "session": "sid", "continue": true},
    {"when": {"type": "msg"}, "each": "content", "each_when": {"type": "text"}, "event": "message", "text": "text", "continue": true},
    {"when": {"type": "msg"}, "each": "content", "each_when": {"type": "call"}, "event": "tool_call", "id": "id", "tool": "name", "input": "args"},
    {"when": {"type": "done"}, "event": "tool_result", "id": "id", "output": "out", "error_when": {"status": "failed"}},
    {"when": {"type": "step"}, "event": "usage", "sum": true, "usage": {"input": "in", "output": "out"}},
    {"when": {"type": "end"}, "event": "finished", "sum": true, "usage": {"input": "in", "output": "out"}}
  ]},
  "storage": {"roots": [".ext"], "files": ["*/{session}.jsonl"], "workdir": "slug"}
}`

func extHarness(t *testing.T) *harness.Harness {
	t.Helper()
	h, err := declarative.Parse("ext.json", []byte(ext), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestExtEvents(t *testing.T) {
	h := extHarness(t)
	dec := harnesstest.Decoder(h)
	var got []harness.Event
	for _, l := range []string{
		`{"type":"msg","sid":"s1","content":[{"type":"text","text":"hi"},{"type":"call","id":"c1","name":"bash","args":{"cmd":"ls"}},{"type":"text","text":"bye"}]}`,
		`{"type":"done","id":"c1","out":"a.txt","status":"failed"}`,
		`{"type":"step","in":10,"out":2}`,
		`{"type":"end","in":5,"out":1}`,
	} {
		got = append(got, dec([]byte(l))...)
	}
	want := []harness.Event{
		{Type: harness.EventSession, Session: "s1"},
		{Type: harness.EventMessage, Text: "hi"},
		{Type: harness.EventMessage, Text: "bye"},
		{Type: harness.EventToolCall, Tool: &harness.Tool{ID: "c1", Name: "bash", Input: json.RawMessage(`{"cmd":"ls"}`)}},
		{Type: harness.EventToolResult, Tool: &harness.Tool{ID: "c1", Output: "a.txt", Error: true}},
		{Type: harness.EventUsage, Usage: &harness.Usage{InputTokens: 10, OutputTokens: 2, Complete: true}},
		{Type: harness.EventFinished, Usage: &harness.Usage{InputTokens: 15, OutputTokens: 3, Complete: true}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	// A new decoder starts a new total.
	if evs := harnesstest.Decoder(h)([]byte(`{"type":"end","in":5,"out":1}`)); evs[0].Usage.InputTokens != 5 {
		t.Errorf("a new turn's total %+v", evs[0].Usage)
	}
}

func TestExtRequest(t *testing.T) {
	h := extHarness(t)
	if !h.NativeSchema {
		t.Fatal("schema_args do not make the schema native")
	}
	cmd, err := h.Request(harness.Input{Prompt: "p", Schema: []byte(`{"type":"object"}`), Model: "m", Home: "/h", Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--schema", `{"type":"object"}`, "--", "p"}; !cmp.Equal(cmd.Args, want) || len(cmd.Files) != 0 {
		t.Errorf("args %q files %v", cmd.Args, cmd.Files)
	}
	cmd, err = h.Request(harness.Input{Prompt: "p", Conversation: "s1", Home: "/h", Workdir: `/w/a "b"`})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--resume", "s1", "--", "p"}; !cmp.Equal(cmd.Args, want) {
		t.Errorf("args %q", cmd.Args)
	}
	if len(cmd.Files) != 1 || cmd.Files[0].Path != ".ext/-w-a--b-/s1.json" || string(cmd.Files[0].Content) != `{"dir":"/w/a \"b\"","n":1}`+"\n" {
		t.Errorf("resume files %+v", cmd.Files)
	}
}

func TestExtConfigurationAndStorage(t *testing.T) {
	h := extHarness(t)
	c, err := h.Configuration(harness.Vars{"EXT_URL": "http://x", "OTHER": "y"})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(c.Variables, map[string]string{"EXT_URL": "http://x"}) || len(c.Files) != 1 ||
		c.Files[0].Path != ".ext/config.json" || c.Files[0].Merge != harness.MergeJSON || !strings.Contains(string(c.Files[0].Content), `"{env:EXT_URL}"`) {
		t.Errorf("configuration %+v", c)
	}
	if got := h.Storage.Place("-old-dir/s1.jsonl", "s1", "/new/dir"); got != "-new-dir/s1.jsonl" {
		t.Errorf("placed at %q", got)
	}
	shared := strings.Replace(ext, `"files": ["*/{session}.jsonl"], "workdir": "slug"`, `"files": ["db.sqlite"], "shared": true`, 1)
	hs, err := declarative.Parse("shared.json", []byte(shared), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !hs.Storage.Match("db.sqlite", "any-session") || hs.Storage.Match("other", "any-session") {
		t.Error("a shared store's files are not every conversation's")
	}
}

// TestOpenCodeResumePrepare: a resumed or forked OpenCode turn first
// points every restored session at the sandbox's working directory
// (OpenCode runs a session where it was recorded), with the directory
// quoted as an SQL string; a new conversation needs nothing.
func TestOpenCodeResumePrepare(t *testing.T) {
	h := declarative.OpenCode()
	want := []harness.Command{{Path: "opencode", Args: []string{"db", "UPDATE session SET directory = '/w/it''s here'"}}}
	for _, fork := range []bool{false, true} {
		c, err := h.Request(harness.Input{Prompt: "p", Workdir: "/w/it's here", Home: "/h", Conversation: "ses_abc", Fork: fork})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, c.Prepare); d != "" {
			t.Errorf("fork %v: prepare (-want +got):\n%s", fork, d)
		}
	}
	c, err := h.Request(harness.Input{Prompt: "p", Workdir: "/w", Home: "/h"})
	if err != nil || c.Prepare != nil {
		t.Errorf("a new conversation's prepare: %v, %v", c.Prepare, err)
	}
}

// TestOpenCodeDroppedConnectionIsUnavailable: OpenCode's message when the
// credential gateway drops its connection (the upstream refused the
// gateway's), measured with the real CLI, is an outage.
func TestOpenCodeDroppedConnectionIsUnavailable(t *testing.T) {
	msg := "Cannot connect to API: The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()"
	if h := declarative.OpenCode(); !h.Unavailable(msg) || h.Quota(msg) {
		t.Errorf("%q: unavailable %v, quota %v", msg, h.Unavailable(msg), h.Quota(msg))
	}
}
