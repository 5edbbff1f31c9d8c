package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
)

// claudeFile describes the real Claude Code CLI in the declarative format
// (docs/presets/custom.md): its stream-json output read through field
// paths, with no Go of Claude's preset. PROGRAM is replaced by the pinned
// binary's path.
const claudeFile = `{
  "kind": "cli",
  "name": "claude-file",
  "program": "PROGRAM",
  "args": ["-p", "--output-format", "stream-json", "--verbose",
           "{model_args}", "{session_args}", "{extra_args}", "--", "{prompt}"],
  "model_args": ["--model={model}"],
  "session": "output",
  "resume_args": ["--resume", "{session}"],
  "fork": {"args": ["--resume", "{parent}", "--fork-session"]},
  "env": {"CLAUDE_CODE_MAX_RETRIES": "0"},
  "variables": {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
  "credentials": {"variables": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"], "required": true},
  "output": {
    "format": "jsonl",
    "events": [
      {"when": {"type": "system", "subtype": "init"}, "event": "session", "session": "session_id"},
      {"when": {"type": "system", "subtype": "api_retry"}, "event": "notice", "kind": "retry", "text": "error"},
      {"when": {"type": "assistant"}, "event": "message", "text": "message.content.*.text", "id": "message.id"},
      {"when": {"type": "result", "is_error": true}, "event": "failure", "text": "result"},
      {"when": {"type": "result"}, "event": "finished", "text": "result", "stop": "stop_reason",
       "usage": {"input": "usage.input_tokens", "output": "usage.output_tokens",
                 "cache_read": "usage.cache_read_input_tokens", "cache_write": "usage.cache_creation_input_tokens"}}
    ],
    "require_finished": true
  },
  "quota": ["(?i)usage limit|rate limit|credit balance is too low"],
  "unavailable": ["(?i)overloaded|api error: 5[0-9][0-9]|connection (refused|error)"],
  "misconfigured": ["(?i)invalid api key|authentication_error|authentication_failed"],
  "retry": ["(?i)retrying"],
  "storage": {"roots": [".claude/projects"], "files": ["*/{session}.jsonl"]},
  "usage": "events",
  "inactivity": "5m"
}`

// TestDeclarativeClaude runs a preset file against the real claude CLI
// (the pinned one, on the local provider) and the fake Messages API: a
// turn, its resume and a fork, decoded only through the file's field
// paths, proving the format can describe a real JSON-lines CLI.
func TestDeclarativeClaude(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "claude")
	srv := anthropic.New(t, anthropic.Options{Usage: fakeUsage})
	key := "sk-ant-fake-" + randomHex(t, 16)
	path := filepath.Join(t.TempDir(), "claude-file.json")
	if err := os.WriteFile(path, []byte(strings.Replace(claudeFile, "PROGRAM", bin, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := declarative.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := conversation.NewFS(t.TempDir())
	prov := local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=" + filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin"}})
	wd := t.TempDir()
	environ := []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=" + key, "HOME=" + t.TempDir()}
	run := func(tn engine.Turn) (*engine.Result, []harness.Event) {
		t.Helper()
		var evs []harness.Event
		tn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: h, Model: tn.Agent.Model}
		tn.Workdir, tn.Timeout = wd, 2*time.Minute
		res, err := engine.Run(context.Background(), tn, &engine.RunOptions{Provider: prov, Store: store, Environ: environ,
			OnEvent: func(ev harness.Event) { evs = append(evs, ev) }})
		if err != nil {
			t.Fatalf("%v", err)
		}
		b, _ := json.Marshal(struct {
			R *engine.Result
			E []harness.Event
		}{res, evs})
		if strings.Contains(string(b), key) {
			t.Error("the API key shows in the events or result")
		}
		return res, evs
	}
	first, evs := run(engine.Turn{Prompt: "say hi", Agent: harness.Agent{Model: "claude-sonnet-4-5"}})
	if first.Text != anthropic.DefaultText || !claude.ValidSessionID(first.Session) || first.Conversation == "" {
		t.Fatalf("first turn %+v", first)
	}
	if want := usageOf(101, 37); first.Usage != want {
		t.Errorf("usage %+v, want %+v", first.Usage, want)
	}
	var types []harness.EventType
	for _, ev := range evs {
		if ev.Type != harness.EventNotice { // the secrets notice: a file without an endpoint runs in env mode
			types = append(types, ev.Type)
		}
	}
	if want := []harness.EventType{harness.EventSession, harness.EventMessage, harness.EventFinished}; !equalTypes(types, want) {
		t.Errorf("events %v, want %v", types, want)
	}
	again, _ := run(engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.Conversation})
	if again.Text != "ECHO nmsg=3 last_user=FAKE_ECHO again" || again.Session != first.Session || again.Model != "claude-sonnet-4-5" {
		t.Errorf("resume %+v", again)
	}
	child, _ := run(engine.Turn{Prompt: "FAKE_ECHO branch", Fork: first.Conversation})
	if child.Text != "ECHO nmsg=5 last_user=FAKE_ECHO branch" || child.Session == first.Session || child.Parent != first.Conversation {
		t.Errorf("fork %+v", child)
	}
	m, _, err := store.Get(context.Background(), first.Conversation)
	if err != nil || m.Agent != "claude-file" || m.Turns != 2 {
		t.Errorf("stored %+v %v", m, err)
	}
}
