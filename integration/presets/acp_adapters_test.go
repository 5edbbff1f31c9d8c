package presets

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
)

// The published ACP adapters and Copilot CLI's ACP mode, each against the
// fake model API its JSONL preset is measured on, on the local provider
// (docs/presets/acp-adapters.md): a shell call and text with usage, the
// conversation resumed on a fresh process, and a 429.

// checkACPTool checks a turn's first tool call (ACP kind execute) and its
// result, and that the turn finished.
func checkACPTool(t *testing.T, o *outcome, output ...string) {
	t.Helper()
	calls, results := o.ofType(harness.EventToolCall), o.ofType(harness.EventToolResult)
	if o.err != nil || len(calls) != 1 || calls[0].Tool.Name != "execute" || len(results) != 1 ||
		results[0].Tool.ID != calls[0].Tool.ID || results[0].Tool.Error || !slices.ContainsFunc(output, func(s string) bool { return strings.Contains(results[0].Tool.Output, s) }) {
		t.Fatalf("tool turn: %v; events %s", o.err, eventSummary(o.events))
	}
}

// TestClaudeACP: claude-code-acp (the Claude Agent SDK's own Claude Code)
// against the fake Messages API: Bash and the answer, usage from the
// prompt's response; resumed (session/resume) in a new process with the
// history; a 429 is quota.
func TestClaudeACP(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "claude-acp")
	fake := anthropic.New(t, anthropic.Options{})
	e := newOAIEnv(t, claude.ACP(), filepath.Dir(bin), openai.Config{})
	e.key = "sk-ant-fake-" + randomHex(t, 12)
	e.vars = map[string]string{"ANTHROPIC_BASE_URL": fake.URL(), "ANTHROPIC_API_KEY": e.key, "HOME": t.TempDir()}
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	checkACPTool(t, first, "hi")
	if first.res.Text != "ECHO nmsg=3 last_user=[tool_result] hi" || first.res.Usage.InputTokens == 0 || first.res.Usage.OutputTokens == 0 {
		t.Errorf("result %+v", first.res)
	}
	again := e.run("local", engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.res.Conversation})
	if again.err != nil || again.res.Session != first.res.Session || again.res.Text != "ECHO nmsg=5 last_user=FAKE_ECHO again" {
		t.Errorf("resume: %v %+v", again.err, again.res)
	}
	if q := e.run("local", engine.Turn{Prompt: "FAKE_429 say hi"}); outpost.CodeOf(q.err) != outpost.Quota {
		t.Errorf("error %v, want quota", q.err)
	}
}

// TestCodexACP: codex-acp (its native binary) against the fake Responses
// API: a shell call and the answer; resumed (session/resume) with the
// history; a 429 after the adapter's retries is quota.
func TestCodexACP(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "codex-acp")
	// The native binary: the npm shim is node, and a killed shim leaves
	// the binary behind.
	native := filepath.Join(filepath.Dir(filepath.Dir(bin)), "@zed-industries", "codex-acp-linux-x64", "bin")
	e := newOAIEnv(t, codex.ACP(), native, openai.Config{})
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	// Under load codex's own end-of-command event can carry only the
	// last chunk of the output ("bye", the model having had both: a CI
	// run saw stdout "bye\n" for `echo hi; echo bye >&2`), so either line
	// proves the command's output was reported.
	checkACPTool(t, first, "hi", "bye")
	if !strings.HasPrefix(first.res.Text, "Tool output was:") {
		t.Errorf("result %+v", first.res)
	}
	again := e.run("local", engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.res.Conversation})
	if again.err != nil || again.res.Session != first.res.Session || !strings.Contains(again.res.Text, "ECHO nmsg=8 last_user=FAKE_ECHO again") {
		t.Errorf("resume: %v %+v", again.err, again.res)
	}
	if q := e.run("local", engine.Turn{Prompt: "FAKE_429 say hi"}); outpost.CodeOf(q.err) != outpost.Quota {
		t.Errorf("error %v, want quota", q.err)
	}
}

// TestCopilotACP: `copilot --acp` in BYOK offline mode against the fake
// Chat Completions API: a shell call and the answer with the usage of
// the prompt's response; resumed (session/load) with the history; a 429
// (Retry-After 0: the CLI's five retries take seconds), which the CLI
// ends end_turn with its error as a message chunk, is quota.
func TestCopilotACP(t *testing.T) {
	t.Parallel()
	shim := testenv.RequireCLI(t, "copilot")
	native := filepath.Join(filepath.Dir(filepath.Dir(shim)), "@github", "copilot-linux-x64", "copilot")
	dir := t.TempDir()
	if err := os.Symlink(native, filepath.Join(dir, "copilot")); err != nil {
		t.Fatal(err)
	}
	fast429 := func(req *openai.Request) openai.Scenario {
		if strings.Contains(req.LastUserText, "CP_FAST_429") {
			return openai.RateLimited().WithRetryAfter("0")
		}
		return openai.Scenario{}
	}
	e := newOAIEnv(t, copilot.ACP(), dir, openai.Config{Choose: fast429})
	e.vars = map[string]string{"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": e.fake.URL(), "COPILOT_PROVIDER_API_KEY": e.key,
		"COPILOT_MODEL": oaiModel, "COPILOT_PKG_CACHE_HOME": filepath.Join(testenv.Cache(), "copilot-pkg"), "HOME": t.TempDir()}
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	checkACPTool(t, first, "hi")
	u := openai.DefaultUsage
	want := harness.Usage{InputTokens: 2 * int64(u.InputTokens-u.CachedTokens), OutputTokens: 2 * int64(u.OutputTokens), CacheReadTokens: 2 * int64(u.CachedTokens), Complete: true}
	if !strings.HasPrefix(first.res.Text, "Tool output was:") || first.res.Usage != want {
		t.Errorf("result %+v, usage want %+v", first.res, want)
	}
	again := e.run("local", engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.res.Conversation})
	if again.err != nil || again.res.Session != first.res.Session || !strings.Contains(again.res.Text, "ECHO nmsg=6") {
		t.Errorf("resume: %v %+v", again.err, again.res)
	}
	q := e.run("local", engine.Turn{Prompt: "CP_FAST_429 say hi"})
	var oe *outpost.Error
	if !errors.As(q.err, &oe) || oe.Code != outpost.Quota || oe.Details["resets_at"] == nil || len(q.ofType(harness.EventMessage)) != 0 {
		t.Errorf("error %v, want quota with resets_at; events %s", q.err, eventSummary(q.events))
	}
}
