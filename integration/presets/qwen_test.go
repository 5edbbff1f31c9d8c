package presets

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

// Qwen Code (docs/presets/qwen.md), the real pinned CLI against the fake
// Chat Completions API, on local (the npm install of
// scripts/install-clis.sh) and docker (bootstrapped into a node image).

func newQwenEnv(t *testing.T, cfg openai.Config) *oaiEnv {
	t.Helper()
	bin := testenv.RequireCLI(t, "qwen")
	e := newOAIEnv(t, declarative.Qwen(), strings.TrimSuffix(bin, "/qwen"), cfg)
	e.sshImage = sshtest.NodeImage // Qwen Code needs node 20
	return e
}

// TestQwenTurns: one conversation through three sandboxes (the pinned
// CLI bootstrapped onto docker and ssh; node 20 from the image), each in
// another working directory, the session file moved to its project
// folder:
//   - begun on local, the model calling the shell tool, then answering
//     (checkQwenToolTurn);
//   - resumed on docker with another tool call: the same events and usage
//     through a container, the first turn's history sent to the model;
//   - forked on an ssh host: a new session with the conversation's
//     history, stored under the fork's own session.
//
// (One turn proves on each sandbox what two tests proved with five.)
func TestQwenTurns(t *testing.T) {
	t.Parallel()
	e := newQwenEnv(t, openai.Config{})
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	checkQwenToolTurn(t, e, first, 2)
	if !claude.ValidSessionID(first.res.Session) || first.res.Conversation == "" {
		t.Fatalf("first %+v", first.res)
	}
	e.fake.Reset()
	again := e.run("docker", engine.Turn{Prompt: "FAKE_TOOL again", Resume: first.res.Conversation})
	// Qwen Code's result line of a resumed session carries the
	// session's totals: the first turn's two calls and this turn's.
	checkQwenToolTurn(t, e, again, 4)
	if again.res.Session != first.res.Session || again.res.Sandbox != "docker" {
		t.Errorf("resume on docker: session %s (want %s), sandbox %s", again.res.Session, first.res.Session, again.res.Sandbox)
	}
	checkHistory(t, e.fake.Requests(), 6, "FAKE_TOOL list the files", "FAKE_TOOL again")
	child := e.run("ssh", engine.Turn{Prompt: "FAKE_ECHO branch", Fork: first.res.Conversation})
	e.mustSucceed(child)
	if child.res.Sandbox != "ssh" || !strings.HasPrefix(child.res.Text, "ECHO nmsg=10 ") || !strings.HasSuffix(strings.TrimSpace(child.res.Text), "FAKE_ECHO branch") ||
		child.res.Session == first.res.Session || child.res.Parent != first.res.Conversation {
		t.Errorf("fork on ssh: %q session %s parent %s", child.res.Text, child.res.Session, child.res.Parent)
	}
	_, files, err := e.store.Get(t.Context(), child.res.Conversation)
	if err != nil || len(files) != 1 || !strings.HasSuffix(files[0].Path, "/chats/"+child.res.Session+".jsonl") {
		t.Errorf("the fork's stored files %+v, %v", files, err)
	}
}

// checkQwenToolTurn checks a FAKE_TOOL turn: session, tool call and
// result, message and finished events, two model calls, and the usage the
// fake reported for its replies to usageCalls calls. The fake's requests
// are the turn's.
func checkQwenToolTurn(t *testing.T, e *oaiEnv, o *outcome, usageCalls int) {
	t.Helper()
	e.mustSucceed(o)
	var types []harness.EventType
	for _, ev := range o.events {
		if ev.Type == harness.EventNotice { // the bootstrap's, on docker
			continue
		}
		types = append(types, ev.Type)
		if ev.Agent != "qwen" || ev.Session != o.res.Session || len(ev.Raw) == 0 {
			t.Errorf("event %+v lacks agent, session or its raw line", ev)
		}
	}
	want := []harness.EventType{harness.EventSession, harness.EventToolCall, harness.EventToolResult, harness.EventMessage, harness.EventFinished}
	if !equalTypes(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	checkShellTool(t, o, "run_shell_command")
	if !strings.HasPrefix(o.res.Text, "Tool output was: ") {
		t.Errorf("text %q", o.res.Text)
	}
	n := e.fake.Count()
	if n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if want := e.fakeUsageOf(usageCalls); o.res.Usage != want {
		t.Errorf("usage %+v, want the fake's %+v", o.res.Usage, want)
	}
	for _, r := range e.fake.Requests() {
		if r.Model != oaiModel || r.BearerToken() != e.key || !r.Stream {
			t.Errorf("request model %q, key ok %v, stream %v", r.Model, r.BearerToken() == e.key, r.Stream)
		}
	}
}

// TestQwenRateLimitIsQuota: a 429 on every request; the CLI retries
// (7 attempts, about 75 s: its own backoff, which no setting shortens)
// and gives up with "[API Error: 429 ...]": code quota.
func TestQwenRateLimitIsQuota(t *testing.T) { onLocal(t, testQwenRateLimitIsQuota) }

func testQwenRateLimitIsQuota(t *testing.T, kind string) {
	e := newQwenEnv(t, openai.Config{})
	o := e.run(kind, engine.Turn{Prompt: "FAKE_429 say hi"})
	if outpost.CodeOf(o.err) != outpost.Quota {
		t.Fatalf("error %v, want code quota; events %s", o.err, eventSummary(o.events))
	}
	if n := e.fake.Count(); n < 2 {
		t.Errorf("%d requests: the CLI did not retry", n)
	}
}

// TestQwenOutageIsUnavailable: 503 on every request, and a base URL
// nothing listens on: code process with details.unavailable, the CLI
// having given up by itself well within the preset's retry bound.
func TestQwenOutageIsUnavailable(t *testing.T) { onLocal(t, testQwenOutageIsUnavailable) }

func testQwenOutageIsUnavailable(t *testing.T, kind string) {
	testOAIOutage(t, kind, func(t *testing.T) *oaiEnv { return newQwenEnv(t, openai.Config{}) })
}

// TestQwenRepair: --json-schema is native (Qwen Code's structured_output
// tool: the instruction is not added to the prompt), and Qwen Code
// validates the tool call's arguments against the schema itself: an
// answer that does not match (age below the minimum) is refused with a
// tool error, the model answers again, and the second answer is the
// turn's output. Outpost's own validation passes it, so no repair turn of
// outpost's is needed. (It was two tests, TestQwenSchema and this, each a
// start of the CLI: the answer accepted at once is this one's second.)
func TestQwenRepair(t *testing.T) {
	t.Parallel()
	e := newQwenEnv(t, openai.Config{})
	e.fake.Enqueue(openai.CallTool("structured_output", `{"name":"Ada","age":-5}`), openai.CallTool("structured_output", openai.StructuredAnswer))
	o := e.run("local", engine.Turn{Prompt: "who wrote the first program?", Output: json.RawMessage(personSchema)})
	e.mustSucceed(o)
	if string(o.res.Output) != openai.StructuredAnswer || len(o.res.Attempts) > 1 {
		t.Fatalf("output %s after %d attempts", o.res.Output, len(o.res.Attempts))
	}
	tools := toolEvents(o)
	if len(tools) != 4 || !tools[1].Tool.Error || tools[3].Tool.Error || e.fake.Count() != 2 {
		t.Fatalf("tool events %+v; events %s", tools, eventSummary(o.events))
	}
	reqs := e.fake.Requests()
	if !reqs[0].HasTool("structured_output") || strings.Contains(reqs[0].LastUserText, "matches this JSON Schema") {
		t.Errorf("the schema did not go natively: tools %v, prompt %q", reqs[0].ToolNames, reqs[0].LastUserText)
	}
	if !strings.Contains(reqs[1].ToolOutput, "age") {
		t.Errorf("the CLI's refusal does not name the bad field: %q", reqs[1].ToolOutput)
	}
}
