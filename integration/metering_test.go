package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/gateway/meter/metertest"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
)

// TestClaudeMetered: the real Claude Code against the fake Anthropic API
// through a meter (as the credential gateway serves it): the metered
// counts equal the fake's token counts exactly and the CLI's own usage;
// with a turn budget spent by the first call, the second is refused in
// Anthropic's shape and Claude Code stops at once, without retrying
// (the fake received one call), reporting a spent quota.
func TestClaudeMetered(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}})
	e.vars["ANTHROPIC_BASE_URL"] = metertest.Proxy(t, m, e.srv.URL())
	o := e.run(engine.Turn{Prompt: "say hi", Agent: harness.Agent{Kind: harness.KindCLI, Model: "claude-sonnet-4-5"}}, turnOpts{})
	e.mustSucceed(o)
	m.Settle(time.Minute)
	got := m.Metered()
	n := int64(len(e.messages()))
	if n == 0 || got.Requests != n || got.InputTokens != 101*n || got.OutputTokens != 37*n || !got.Complete ||
		got.ByModel["claude-sonnet-4-5"].Requests != n {
		t.Errorf("metered %+v for %d calls of 101 in, 37 out", got, n)
	}
	if o.res.Usage != got.Usage {
		t.Errorf("the CLI reported %+v, the meter counted %+v", o.res.Usage, got.Usage)
	}

	// A budget the first call spends (its prompt, estimated from Claude
	// Code's request of some 10^4 tokens, fits; the fake reports 10^5):
	// FAKE_TOOL makes Claude Code call a tool and then the API again,
	// which the meter refuses.
	e2 := newClaudeEnv(t, "local", anthropic.Options{Usage: anthropic.Usage{InputTokens: 100000, OutputTokens: 37}})
	m2 := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 100000}}})
	e2.vars["ANTHROPIC_BASE_URL"] = metertest.Proxy(t, m2, e2.srv.URL())
	o2 := e2.run(engine.Turn{Prompt: "use a tool FAKE_TOOL", Options: map[string]string{"max-retries": "3"}}, turnOpts{})
	if n := len(e2.messages()); n != 1 {
		t.Errorf("the fake received %d calls, want the one before the budget was spent", n)
	}
	if x := m2.Exceeded(); x == nil || x.Spent != 100037 {
		t.Errorf("exceeded %+v, want 100037 tokens spent", x)
	}
	if outpost.CodeOf(o2.err) != outpost.Quota {
		t.Errorf("claude ended with %v (stderr %s), want a spent quota", o2.err, lastLines(o2.stderr))
	}
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// TestCodexMetered: the real Codex CLI against the fake OpenAI Responses
// API through a meter: the metered counts equal the fake's and the
// CLI's; a spent turn budget refuses the call after a tool call with
// OpenAI's insufficient_quota and Codex ends with a spent quota, the
// fake having received the one call.
func TestCodexMetered(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	m := meter.New(meter.Options{APIs: []string{meter.OpenAIResponses}})
	e.environ = []string{"OPENAI_BASE_URL=" + metertest.Proxy(t, m, e.fake.Root()) + "/v1", "OPENAI_API_KEY=" + codexKey, "HOME=" + os.Getenv("HOME")}
	tr := e.run(context.Background(), engine.Turn{Prompt: "Say hello"}, nil, nil)
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	m.Settle(time.Minute)
	got := m.Metered()
	n := int64(e.fake.Count())
	u := openai.DefaultUsage
	if n == 0 || got.Requests != n || got.InputTokens != int64(u.InputTokens-u.CachedTokens)*n || got.CacheReadTokens != int64(u.CachedTokens)*n ||
		got.OutputTokens != int64(u.OutputTokens)*n || got.ReasoningTokens != int64(u.ReasoningTokens)*n || !got.Complete {
		t.Errorf("metered %+v for %d calls of %+v", got, n, u)
	}
	if tr.res.Usage != got.Usage {
		t.Errorf("the CLI reported %+v, the meter counted %+v", tr.res.Usage, got.Usage)
	}

	e2 := newCodexEnv(t, openai.Config{Usage: &openai.Usage{InputTokens: 100000, OutputTokens: 10}})
	m2 := meter.New(meter.Options{APIs: []string{meter.OpenAIResponses}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 100000}}})
	e2.environ = []string{"OPENAI_BASE_URL=" + metertest.Proxy(t, m2, e2.fake.Root()) + "/v1", "OPENAI_API_KEY=" + codexKey, "HOME=" + os.Getenv("HOME")}
	e2.fake.Enqueue(openai.ToolCall("echo hi"))
	tr2 := e2.run(context.Background(), engine.Turn{Prompt: "run a command"}, nil, nil)
	if n := e2.fake.Count(); n != 1 {
		t.Errorf("the fake received %d calls, want the one before the budget was spent", n)
	}
	if x := m2.Exceeded(); x == nil || x.Spent != 100010 {
		t.Errorf("exceeded %+v, want 100010 tokens spent", x)
	}
	if outpost.CodeOf(tr2.err) != outpost.Quota {
		t.Errorf("codex ended with %v, want a spent quota", tr2.err)
	}
}
