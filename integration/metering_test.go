package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/gateway/meter/metertest"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/sandbox"
)

// TestClaudeMetered: the real Claude Code against the fake Anthropic API
// through a meter (as the credential gateway serves it): the metered
// counts equal the fake's token counts exactly and the CLI's own usage;
// with a turn budget spent by the first call, the second is refused in
// Anthropic's shape and Claude Code stops at once, without retrying
// (the fake received one call), reporting a spent quota.
func TestClaudeMetered(t *testing.T) {
	e := newClaudeEnv(t, "local", anthropic.Options{})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}})
	e.vars["ANTHROPIC_BASE_URL"] = metertest.Proxy(t, m, e.srv.URL())
	o := e.run(sandbox.Turn{Prompt: "say hi", Agent: harness.Agent{Kind: harness.KindCLI, Model: "claude-sonnet-4-5"}}, turnOpts{})
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
	o2 := e2.run(sandbox.Turn{Prompt: "use a tool FAKE_TOOL", Options: map[string]string{"max-retries": "3"}}, turnOpts{})
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
