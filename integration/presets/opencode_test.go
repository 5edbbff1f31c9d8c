package presets

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
)

// OpenCode (docs/presets/opencode.md), the real pinned CLI (its native
// linux-x64 binary) against the fake Chat Completions API through the
// provider the preset writes into its configuration.

func newOpenCodeEnv(t *testing.T) *oaiEnv {
	t.Helper()
	bin := testenv.RequireCLI(t, "opencode")
	return newOAIEnv(t, declarative.OpenCode(), filepath.Dir(bin), openai.Config{})
}

// TestOpenCodeTurns: one conversation through three sandboxes, each in
// another working directory (OpenCode's database travels whole, and
// before a resumed or forked turn the preset points its sessions at the
// sandbox's working directory: OpenCode runs a session where it was
// recorded, and without that the resumed turn hangs or fails):
//   - begun on local, the model calling bash, then answering
//     (checkOpenCodeToolTurn), the turn metered at the credential gateway
//     (checkOpenCodeMetered);
//   - resumed in a docker sandbox with another bash call: the same events
//     and usage through a container, the first turn's history sent to the
//     model;
//   - forked on an ssh host: a new session with the conversation's history.
//
// (One turn proves on each sandbox what three tests proved with six.)
func TestOpenCodeTurns(t *testing.T) {
	t.Parallel()
	e := newOpenCodeEnv(t)
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	checkOpenCodeToolTurn(t, e, first)
	checkOpenCodeMetered(t, e, first)
	if !strings.HasPrefix(first.res.Session, "ses_") || first.res.Conversation == "" {
		t.Fatalf("first %+v", first.res)
	}
	e.fake.Reset()
	again := e.run("docker", engine.Turn{Prompt: "FAKE_TOOL again", Resume: first.res.Conversation})
	checkOpenCodeToolTurn(t, e, again)
	if again.res.Session != first.res.Session || again.res.Sandbox != "docker" {
		t.Errorf("resume: session %s (want %s), sandbox %s", again.res.Session, first.res.Session, again.res.Sandbox)
	}
	checkHistory(t, e.fake.Requests(), 6, "FAKE_TOOL list the files", "FAKE_TOOL again")
	child := e.run("ssh", engine.Turn{Prompt: "FAKE_ECHO branch", Fork: first.res.Conversation})
	e.mustSucceed(child)
	if !strings.HasPrefix(child.res.Text, "ECHO nmsg=10 ") || child.res.Session == first.res.Session || child.res.Parent != first.res.Conversation || child.res.Sandbox != "ssh" {
		t.Errorf("fork: %q session %s parent %s sandbox %s", child.res.Text, child.res.Session, child.res.Parent, child.res.Sandbox)
	}
}

// checkOpenCodeToolTurn checks a FAKE_TOOL turn: session, tool call and
// result (one line of OpenCode's), message, a usage event per step and
// finished, with usage the sum of the fake's two replies (OpenCode splits
// them: input without the cached tokens, output without the reasoning
// tokens). The fake's requests are the turn's.
func checkOpenCodeToolTurn(t *testing.T, e *oaiEnv, o *outcome) {
	t.Helper()
	e.mustSucceed(o)
	var types []harness.EventType
	for _, ev := range o.events {
		if ev.Type == harness.EventNotice {
			continue
		}
		if len(types) == 0 || types[len(types)-1] != ev.Type || ev.Type != harness.EventSession {
			types = append(types, ev.Type)
		}
		if ev.Agent != "opencode" || ev.Session != o.res.Session || len(ev.Raw) == 0 {
			t.Errorf("event %+v lacks agent, session or its raw line", ev)
		}
	}
	want := []harness.EventType{harness.EventSession, harness.EventToolCall, harness.EventToolResult, harness.EventUsage,
		harness.EventSession, harness.EventMessage, harness.EventFinished}
	if !equalTypes(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	checkShellTool(t, o, "bash")
	if !strings.HasPrefix(o.res.Text, "Tool output was: ") {
		t.Errorf("text %q", o.res.Text)
	}
	// OpenCode also asks the model for the session's title, in a request
	// without tools whose usage it does not report. A reply OpenCode
	// abandoned before its end (and asked again) is not in its usage.
	n := 0
	var seen []string
	for _, r := range e.fake.Requests() {
		seen = append(seen, fmt.Sprintf("#%d %s tools %d input %d: %s", r.Seq, r.Time.Format("15:04:05.000"), len(r.ToolNames), r.NumInput, r.Ended))
		if len(r.ToolNames) > 0 && r.Ended != fakeapi.EndClientGone {
			n++
		}
		if r.Ended == fakeapi.EndClientGone {
			// The gateway's records say which layer cut the reply.
			testenv.ShowLog(t, "an abandoned reply")
		}
		if r.Model != oaiModel || r.BearerToken() != e.key {
			t.Errorf("request model %q, key ok %v", r.Model, r.BearerToken() == e.key)
		}
	}
	u := openai.DefaultUsage
	wantUsage := harness.Usage{InputTokens: int64(n * (u.InputTokens - u.CachedTokens)), OutputTokens: int64(n * (u.OutputTokens - u.ReasoningTokens)),
		CacheReadTokens: int64(n * u.CachedTokens), Complete: true}
	if n != 2 || o.res.Usage != wantUsage {
		t.Errorf("%d whole replies of the turn, usage %+v, want 2 and %+v; the requests:\n%s", n, o.res.Usage, wantUsage, strings.Join(seen, "\n"))
	}
}

// TestOpenCodeRateLimitIsQuota: 429 on every request; OpenCode retries by
// itself, silently, then reports the error: code quota.
func TestOpenCodeRateLimitIsQuota(t *testing.T) { onLocal(t, testOpenCodeRateLimitIsQuota) }

func testOpenCodeRateLimitIsQuota(t *testing.T, kind string) {
	e := newOpenCodeEnv(t)
	o := e.run(kind, engine.Turn{Prompt: "FAKE_429 say hi"})
	if outpost.CodeOf(o.err) != outpost.Quota {
		t.Fatalf("error %v, want code quota; events %s", o.err, eventSummary(o.events))
	}
}

// TestOpenCodeOutageIsUnavailable: 503, and a base URL nothing listens
// on: code process with details.unavailable.
func TestOpenCodeOutageIsUnavailable(t *testing.T) { onLocal(t, testOpenCodeOutageIsUnavailable) }

func testOpenCodeOutageIsUnavailable(t *testing.T, kind string) {
	testOAIOutage(t, kind, newOpenCodeEnv)
}

// TestOpenCodeSchema: OpenCode has no schema flag: the instruction goes
// into the prompt, and outpost extracts the fenced answer; a first answer
// that does not match is repaired by resuming the conversation.
func TestOpenCodeSchema(t *testing.T) { onLocal(t, testOpenCodeSchema) }

func testOpenCodeSchema(t *testing.T, kind string) {
	e := newOpenCodeEnv(t)
	// The session-title request (no tools) gets a title; the turn's
	// first answer does not match the schema, the repair's does.
	var answers atomic.Int32
	e.fake.SetChooser(func(r *openai.Request) openai.Scenario {
		if len(r.ToolNames) == 0 {
			return openai.Text("A title")
		}
		if answers.Add(1) == 1 {
			return openai.Text("Here.\n```json\n{\"name\": \"Ada\", \"age\": -5}\n```")
		}
		return openai.Text("```json\n{\"name\": \"Ada Lovelace\", \"age\": 36}\n```")
	})
	o := e.run(kind, engine.Turn{Prompt: "who wrote the first program?", Output: json.RawMessage(personSchema)})
	e.mustSucceed(o)
	if string(o.res.Output) != openai.StructuredAnswer {
		t.Fatalf("output %s", o.res.Output)
	}
	if reps := o.kind("repair"); len(reps) != 1 || len(o.res.Attempts) != 2 {
		t.Fatalf("repair notices %+v, attempts %d", reps, len(o.res.Attempts))
	}
	var reqs []openai.Request
	for _, r := range e.fake.Requests() {
		if len(r.ToolNames) > 0 {
			reqs = append(reqs, r)
		}
	}
	if !strings.Contains(reqs[0].LastUserText, "matches this JSON Schema") {
		t.Errorf("the instruction did not reach the model")
	}
	if last := reqs[len(reqs)-1].LastUserText; !strings.Contains(last, "Your last answer does not match the required JSON Schema") {
		t.Errorf("repair message %q", last)
	}
}

// checkOpenCodeMetered checks that the first turn of a session, through
// the credential gateway (the default), was metered at the gateway: every
// call the fake answered, the session-title request OpenCode does not
// report included, with the reasoning tokens inside output. OpenCode's own
// usage stays as it reported it, and the difference is a metered notice.
func checkOpenCodeMetered(t *testing.T, e *oaiEnv, o *outcome) {
	t.Helper()
	var n int64
	for _, r := range e.fake.Requests() {
		if r.Method == "POST" {
			n++
		}
	}
	u := openai.DefaultUsage
	want := harness.MeteredUsage{Requests: n, ReasoningTokens: n * int64(u.ReasoningTokens), Usage: harness.Usage{
		InputTokens: n * int64(u.InputTokens-u.CachedTokens), CacheReadTokens: n * int64(u.CachedTokens), OutputTokens: n * int64(u.OutputTokens), Complete: true}}
	if o.res.Metered == nil || o.res.Metered.MeteredUsage != want || n != 3 {
		t.Errorf("metered %+v, want %+v (%d calls)", o.res.Metered, want, n)
	}
	if own := (harness.Usage{InputTokens: 2 * int64(u.InputTokens-u.CachedTokens), CacheReadTokens: 2 * int64(u.CachedTokens),
		OutputTokens: 2 * int64(u.OutputTokens-u.ReasoningTokens), Complete: true}); o.res.Usage != own {
		t.Errorf("usage %+v, want OpenCode's own %+v", o.res.Usage, own)
	}
	if ns := o.kind("metered"); len(ns) != 1 {
		t.Errorf("metered notices %+v, want one", ns)
	}
}
