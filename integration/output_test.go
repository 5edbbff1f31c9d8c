package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/output"
)

// Structured answers (docs/output.md) with the real CLIs against the fake
// model APIs: Claude Code's native --json-schema (the StructuredOutput
// tool, and the text-first path where the CLI re-prompts), response repair
// by resuming the conversation, Codex --output-schema (the fake sees the
// request's text.format), Copilot through the instruction and extraction,
// the result/handoff protocol and the files a turn changed.

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}`

func intPtr(n int) *int { return &n }

func TestClaudeStructuredOutput(t *testing.T) { eachProvider(t, testClaudeStructuredOutput) }

// testClaudeStructuredOutput: the model answers through the
// StructuredOutput tool the CLI offers for --json-schema.
func testClaudeStructuredOutput(t *testing.T, kind string) {
	e := newClaudeEnv(t, kind, anthropic.Options{})
	e.srv.Enqueue(anthropic.StructuredOutput(map[string]any{"name": "Ada", "age": 36}))
	o := e.run(engine.Turn{Prompt: "who wrote the first program?", Output: json.RawMessage(personSchema)}, turnOpts{})
	e.mustSucceed(o)
	if string(o.res.Output) != `{"name":"Ada","age":36}` && string(o.res.Output) != `{"age":36,"name":"Ada"}` {
		t.Errorf("output %s (text %q)", o.res.Output, o.res.Text)
	}
	reqs := e.messages()
	if len(reqs) == 0 || !reqs[0].HasTool(anthropic.StructuredOutputTool) {
		t.Fatalf("the CLI did not offer the StructuredOutput tool: %+v", reqs)
	}
	var got, want any
	json.Unmarshal(reqs[0].ToolSchema(anthropic.StructuredOutputTool), &got)
	json.Unmarshal([]byte(personSchema), &want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the tool's schema is not the turn's (-want +got):\n%s", d)
	}
	// Native: no instruction in the prompt.
	if strings.Contains(reqs[0].LastUserText, "matches this JSON Schema") {
		t.Errorf("the instruction was added for a native CLI: %q", reqs[0].LastUserText)
	}
	if len(o.kind("repair")) != 0 || len(o.res.Attempts) != 1 {
		t.Errorf("attempts %+v", o.res.Attempts)
	}
}

// TestClaudeStructuredTextFirst: the model answers in text first; the CLI
// re-prompts it to call the tool, it answers the JSON as text, and outpost
// extracts and validates that.
func TestClaudeStructuredTextFirst(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	e.srv.Enqueue(anthropic.Text("Let me think."), anthropic.Text("Here it is: {\"name\": \"Grace\"}"))
	o := e.run(engine.Turn{Prompt: "name a pioneer", Output: json.RawMessage(personSchema)}, turnOpts{})
	e.mustSucceed(o)
	if string(o.res.Output) != `{"name":"Grace"}` {
		t.Errorf("output %s", o.res.Output)
	}
	reqs := e.messages()
	if len(reqs) != 2 || !strings.Contains(reqs[1].LastUserText, "StructuredOutput") {
		t.Errorf("the CLI did not re-prompt: %d requests, last user %q", len(reqs), reqs[len(reqs)-1].LastUserText)
	}
	if len(o.kind("repair")) != 0 {
		t.Error("outpost repaired an answer the CLI's own re-prompt fixed")
	}
}

// TestClaudeRepair: the answer is invalid JSON even after the CLI's own
// re-prompt; outpost resumes the conversation with a repair message naming
// the error, and the second attempt validates. Usage is the sum.
func TestClaudeRepair(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	// Invalid JSON, twice: the first answer, and the one after the CLI's
	// own re-prompt.
	e.srv.Enqueue(anthropic.Text("```json\n{\"name\": \"Linus\",\n```"), anthropic.Text("```json\n{\"name\": \"Linus\",\n```"),
		anthropic.StructuredOutput(map[string]any{"name": "Linus"}))
	o := e.run(engine.Turn{Prompt: "name a kernel author", Output: json.RawMessage(personSchema)}, turnOpts{})
	e.mustSucceed(o)
	if string(o.res.Output) != `{"name":"Linus"}` {
		t.Fatalf("output %s", o.res.Output)
	}
	reqs := e.messages()
	if len(reqs) != 3 {
		t.Fatalf("%d requests: %s", len(reqs), eventSummary(o.events))
	}
	repair := reqs[2].LastUserText
	if !strings.Contains(repair, "Your last answer does not match the required JSON Schema") ||
		!strings.Contains(repair, "(root): the answer is not valid JSON") || !strings.Contains(repair, `"required":["name"]`) {
		t.Errorf("repair message %q", repair)
	}
	// The repair resumed the same conversation: the history came along.
	if reqs[2].NumMessages <= reqs[1].NumMessages {
		t.Errorf("the repair did not resume the conversation: %d messages then %d", reqs[1].NumMessages, reqs[2].NumMessages)
	}
	reps := o.kind("repair")
	if len(reps) != 1 || reps[0].Details["attempt"] != 2 {
		t.Errorf("repair notices %+v", reps)
	}
	if len(o.res.Attempts) != 2 {
		t.Fatalf("attempts %+v", o.res.Attempts)
	}
	a1, a2 := o.res.Attempts[0].Usage, o.res.Attempts[1].Usage
	if a1 != usageOf(202, 74) || a2 != usageOf(101, 37) || o.res.Usage != a1.Add(a2) {
		t.Errorf("usage %+v, attempts %+v %+v", o.res.Usage, a1, a2)
	}
	m, err := e.store.Meta(context.Background(), o.res.Conversation)
	if err != nil || m.Turns != 2 {
		t.Errorf("stored conversation %+v, %v", m, err)
	}
}

// TestClaudeRepairExhausted: every answer is prose; after one repair the
// turn fails with code output, the last text in details.raw, redacted.
func TestClaudeRepairExhausted(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	leak := "prose that quotes the key " + e.key
	e.srv.Enqueue(anthropic.Text("no"), anthropic.Text("no again"), anthropic.Text("still no"), anthropic.Text(leak))
	o := e.run(engine.Turn{Prompt: "refuse", Output: json.RawMessage(personSchema), Repairs: intPtr(1)}, turnOpts{})
	var oe *outpost.Error
	if !errors.As(o.err, &oe) || oe.Code != outpost.Output || outpost.ExitCode(o.err) != 10 {
		t.Fatalf("err = %v, want output", o.err)
	}
	raw, _ := oe.Details["raw"].(string)
	if !strings.Contains(raw, "prose that quotes the key") || strings.Contains(raw, e.key) {
		t.Errorf("raw %q", raw)
	}
	if oe.Details["attempts"] != 2 {
		t.Errorf("details %v", oe.Details)
	}
}

// TestClaudeProtocol: the result and handoff blocks and the fallback,
// through the prompt instruction (the protocol is not native).
func TestClaudeProtocol(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	e.srv.Enqueue(
		anthropic.Text("Done.\n\n```json\n{\"result\": {\"summary\": \"nothing to change\", \"changedFiles\": [\"made-up.go\"]}}\n```"),
		anthropic.Text("Not for me.\n```json\n{\"handoff\": {\"to\": \"tester\", \"task\": \"run the tests\", \"context\": \"after the refactor\"}}\n```"),
		anthropic.Text("I looked around and everything is fine.\n\nNo further action."),
	)
	o := e.run(engine.Turn{Prompt: "check", Protocol: "handoff"}, turnOpts{})
	e.mustSucceed(o)
	// The block's own changedFiles is kept as the claim, beside the files
	// outpost saw change (none).
	if d := cmp.Diff(&output.Outcome{Kind: "result", Summary: "nothing to change", ChangedFiles: []string{}, ClaimedChangedFiles: []string{"made-up.go"}}, o.res.Protocol); d != "" {
		t.Errorf("result (-want +got):\n%s", d)
	}
	if reqs := e.messages(); !strings.Contains(reqs[0].LastUserText, `{"handoff": {"to": "<agent>"`) {
		t.Errorf("the protocol instruction did not reach the model: %q", reqs[0].LastUserText)
	}
	o = e.run(engine.Turn{Prompt: "check", Protocol: "handoff"}, turnOpts{})
	e.mustSucceed(o)
	if d := cmp.Diff(&output.Outcome{Kind: "handoff", To: "tester", Task: "run the tests", Context: "after the refactor"}, o.res.Protocol); d != "" {
		t.Errorf("handoff (-want +got):\n%s", d)
	}
	o = e.run(engine.Turn{Prompt: "check", Protocol: "handoff"}, turnOpts{})
	e.mustSucceed(o)
	if o.res.Protocol == nil || !o.res.Protocol.Fallback || o.res.Protocol.Summary != "I looked around and everything is fine." || len(o.kind("protocol_fallback")) != 1 {
		t.Errorf("fallback %+v", o.res.Protocol)
	}
}

func TestClaudeChangedFiles(t *testing.T) { eachProvider(t, testClaudeChangedFiles) }

// testClaudeChangedFiles: the agent writes, edits and deletes files with
// its Bash tool; outpost reports exactly that, whatever the model claims.
func testClaudeChangedFiles(t *testing.T, kind string) {
	e := newClaudeEnv(t, kind, anthropic.Options{})
	for name, content := range map[string]string{"edit.txt": "old\n", "gone.txt": "bye\n", "keep.txt": "same\n", ".outpost/.env": "X=1\n"} {
		p := filepath.Join(e.workdir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if kind == "docker" && os.Getuid() == 0 {
		filepath.Walk(e.workdir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, 1000, 1000) })
	}
	e.srv.Enqueue(anthropic.Bash("mkdir -p src && echo new > src/new.txt && echo more >> edit.txt && rm gone.txt"),
		anthropic.Text("Done.\n```json\n{\"result\": {\"summary\": \"edited\", \"changedFiles\": [\"everything\"]}}\n```"))
	o := e.run(engine.Turn{Prompt: "change things", Protocol: "handoff", Options: map[string]string{"permission-mode": "bypassPermissions"}}, turnOpts{})
	e.mustSucceed(o)
	want := &output.Changes{Complete: true, Files: []output.ChangedFile{
		{Path: "edit.txt", Operation: "modified"}, {Path: "gone.txt", Operation: "deleted"}, {Path: "src/new.txt", Operation: "created"},
	}}
	if d := cmp.Diff(want, o.res.ChangedFiles); d != "" {
		t.Errorf("changed files (-want +got):\n%s\nevents: %s", d, eventSummary(o.events))
	}
	if o.res.Protocol == nil || !cmp.Equal(o.res.Protocol.ChangedFiles, []string{"edit.txt", "gone.txt", "src/new.txt"}) {
		t.Errorf("protocol %+v", o.res.Protocol)
	}
}

// TestCodexOutputSchema: Codex gets the schema with --output-schema (the
// file outpost writes into the sandbox); the fake sees it as the request's
// text.format, and the answer validates.
func TestCodexOutputSchema(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{Text: `{"name":"Margaret","age":33}`})
	tr := e.run(context.Background(), engine.Turn{Prompt: "who led Apollo software?", Output: json.RawMessage(personSchema)}, nil, nil)
	if tr.err != nil {
		t.Fatalf("turn failed: %v", tr.err)
	}
	if string(tr.res.Output) != `{"name":"Margaret","age":33}` {
		t.Errorf("output %s", tr.res.Output)
	}
	reqs := e.fake.Requests()
	if len(reqs) == 0 || reqs[0].OutputFormat == nil {
		t.Fatalf("the request carried no text.format: %+v", reqs)
	}
	var got map[string]any
	json.Unmarshal(reqs[0].OutputSchema(), &got)
	if props, _ := got["properties"].(map[string]any); props["name"] == nil || reqs[0].OutputFormat["type"] != "json_schema" {
		t.Errorf("text.format %v", reqs[0].OutputFormat)
	}
	if strings.Contains(reqs[0].LastUserText, "matches this JSON Schema") {
		t.Error("the instruction was added for a native CLI")
	}
}

// TestCopilotInstruction: Copilot cannot enforce a schema: the instruction
// goes into the prompt and outpost extracts the last fenced block.
func TestCopilotInstruction(t *testing.T) {
	t.Parallel()
	e := newCopilotEnv(t)
	e.fake.Enqueue(openai.Text("Sure.\n\n```json\n{\"name\": \"Barbara\", \"age\": 88}\n```\nAnything else?"))
	tr := e.run(engine.Turn{Prompt: "name a pioneer", Output: json.RawMessage(personSchema)})
	if tr.err != nil {
		t.Fatalf("turn failed: %v\n%s", tr.err, tr.stderr)
	}
	if string(tr.res.Output) != `{"name":"Barbara","age":88}` {
		t.Errorf("output %s", tr.res.Output)
	}
	var seen bool
	for _, r := range e.fake.Requests() {
		if strings.Contains(r.LastUserText, "matches this JSON Schema") && strings.Contains(r.LastUserText, `"required":["name"]`) {
			seen = true
		}
	}
	if !seen {
		t.Error("the instruction did not reach the model")
	}
	_ = harness.EventNotice
}
