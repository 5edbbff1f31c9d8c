package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/internal/testenv"
)

// bigCall is the input tokens of every call of the budget tests' fakes:
// one call spends a budget of bigCall.
const bigCall = 100000

// meteredCLI is one real CLI of keylessCLIs against its fake with a
// usage of its own, for the metering tests through engine.Run.
type meteredCLI struct {
	keylessCLI
	// start starts the fake answering every call with in input tokens
	// (0: the fake's default usage), the first with a tool call when tool
	// is set; want is the usage of n calls, calls the model calls the fake
	// received and how many of their replies the agent abandoned before
	// their end.
	start func(t *testing.T, in int, tool bool) (environ []string, want func(n int64) harness.MeteredUsage, calls func() (n, abandoned int))
}

var meteredCLIs = []meteredCLI{
	{
		keylessCLI: keylessCLIs[0],
		start: func(t *testing.T, in int, tool bool) ([]string, func(int64) harness.MeteredUsage, func() (int, int)) {
			u := anthropic.Usage{InputTokens: anthropic.DefaultInputTokens, OutputTokens: anthropic.DefaultOutputToken}
			if in > 0 {
				u.InputTokens = in
			}
			srv := anthropic.New(t, anthropic.Options{Usage: u})
			if tool {
				srv.Enqueue(anthropic.ToolUse("Bash", map[string]any{"command": "echo hi"}))
			}
			want := func(n int64) harness.MeteredUsage {
				return harness.MeteredUsage{Requests: n, Usage: harness.Usage{InputTokens: int64(u.InputTokens) * n, OutputTokens: int64(u.OutputTokens) * n, Complete: true}}
			}
			return []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=sk-ant-metered"}, want,
				func() (n, abandoned int) {
					for _, r := range srv.MessageRequests() {
						n++
						if r.Ended == fakeapi.EndClientGone {
							abandoned++
						}
					}
					return n, abandoned
				}
		},
	},
	{
		keylessCLI: keylessCLIs[1],
		start: func(t *testing.T, in int, tool bool) ([]string, func(int64) harness.MeteredUsage, func() (int, int)) {
			u := openai.DefaultUsage
			if in > 0 {
				u = openai.Usage{InputTokens: in, OutputTokens: 10}
			}
			srv := openai.Start(t, openai.Config{Usage: &u})
			if tool {
				srv.Enqueue(openai.ToolCall("echo hi"))
			}
			want := func(n int64) harness.MeteredUsage {
				return harness.MeteredUsage{Requests: n, ReasoningTokens: int64(u.ReasoningTokens) * n, Usage: harness.Usage{InputTokens: int64(u.InputTokens-u.CachedTokens) * n,
					CacheReadTokens: int64(u.CachedTokens) * n, OutputTokens: int64(u.OutputTokens) * n, Complete: true}}
			}
			return []string{"OPENAI_BASE_URL=" + srv.URL(), "OPENAI_API_KEY=sk-metered"}, want, func() (n, abandoned int) {
				for _, r := range srv.Requests() {
					n++
					if r.Ended == fakeapi.EndClientGone {
						abandoned++
					}
				}
				return n, abandoned
			}
		},
	},
}

// runMetered runs one turn of c on a local sandbox with store, in
// secrets mode gateway (the default).
func runMetered(t *testing.T, c keylessCLI, store conversation.Store, environ []string, tn engine.Turn, mod func(*engine.RunOptions)) keylessRun {
	t.Helper()
	return runKeyless(t, c, environ, tn, func(o *engine.RunOptions) {
		o.Store = store
		if mod != nil {
			mod(o)
		}
	})
}

// TestRunMetered: a real claude and codex turn through engine.Run, whose
// model calls the credential gateway meters: Result.Metered equals the
// fake's token counts exactly, per model too, and so does the CLI's own
// usage (no metered notice).
func TestRunMetered(t *testing.T) {
	t.Parallel()
	for _, c := range meteredCLIs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			environ, want, calls := c.start(t, 0, false)
			r := runMetered(t, c.keylessCLI, conversation.NewFS(t.TempDir()), environ, engine.Turn{Prompt: "say hi"}, nil)
			if r.err != nil {
				t.Fatalf("turn: %v", r.err)
			}
			n, gone := calls()
			m := r.res.Metered
			if n == 0 || m == nil {
				t.Fatalf("%d calls, metered %+v", n, m)
			}
			checkMetered(t, m.MeteredUsage, want, n, gone)
			if len(m.ByModel) != 1 {
				t.Errorf("by model %+v, want one model", m.ByModel)
			}
			for model, u := range m.ByModel {
				if u != m.MeteredUsage {
					t.Errorf("model %s: %+v", model, u)
				}
			}
			if gone == 0 && r.res.Usage != want(int64(n)).Usage {
				t.Errorf("the CLI's usage %+v, want %+v", r.res.Usage, want(int64(n)).Usage)
			}
			if ns := r.notices("metered"); len(ns) != 0 {
				t.Errorf("metered notices %+v", ns)
			}
		})
	}
}

// checkMetered checks what a turn of n model calls metered, want being
// the usage of whole calls: exactly want(n), unless the agent abandoned
// gone of the replies before their end (a CLI may give up on a reply and
// ask again; the fake records it), in which case the count is marked
// incomplete and holds every call, the whole ones in full and no more
// than the abandoned ones could have added.
func checkMetered(t *testing.T, got harness.MeteredUsage, want func(int64) harness.MeteredUsage, n, gone int) {
	t.Helper()
	if gone == 0 {
		if got != want(int64(n)) {
			t.Errorf("metered %+v, want %+v from %d calls", got, want(int64(n)), n)
		}
		return
	}
	t.Logf("the agent abandoned %d of its %d replies before their end", gone, n)
	testenv.ShowLog(t, "an abandoned reply")
	whole, all := want(int64(n-gone)).Tokens(), want(int64(n)).Tokens()
	if got.Requests != int64(n) || got.Complete || got.Tokens() < whole || got.Tokens() > all {
		t.Errorf("metered %+v from %d calls, %d abandoned: want %d requests, incomplete, %d to %d tokens", got, n, gone, n, whole, all)
	}
}

// TestRunBudgetMidTurn: a turn budget of one call's tokens through
// engine.Run: the first call (a tool call) spends it, the call after the
// tool's result is refused at the gateway, and the turn ends with code
// budget and its details; the conversation is stored, the fake received
// the one call, and a resume with a larger budget continues it.
func TestRunBudgetMidTurn(t *testing.T) {
	t.Parallel()
	for _, c := range meteredCLIs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			environ, want, calls := c.start(t, bigCall, true)
			store := conversation.NewFS(t.TempDir())
			r := runMetered(t, c.keylessCLI, store, environ, engine.Turn{Prompt: "run a command"},
				func(o *engine.RunOptions) { o.MaxTokens = bigCall })
			var oe *outpost.Error
			if !errors.As(r.err, &oe) || oe.Code != outpost.Budget {
				t.Fatalf("error %v, want code budget", r.err)
			}
			spent := want(1).Tokens()
			if oe.Details["budget"] != "turn" || oe.Details["limit"] != int64(bigCall) || oe.Details["spent"] != spent {
				t.Errorf("details %v, want budget turn, limit %d, spent %d", oe.Details, bigCall, spent)
			}
			if n, _ := calls(); n != 1 {
				t.Errorf("the fake received %d calls, want the one before the budget was spent", n)
			}
			if r.res == nil || r.res.Conversation == "" {
				t.Fatalf("result %+v: the conversation was not stored", r.res)
			}
			if m := r.res.Metered; m == nil || m.MeteredUsage != want(1) {
				t.Errorf("metered %+v, want the one call", m)
			}
			meta, _, err := store.Get(context.Background(), r.res.Conversation)
			if err != nil || meta.Metered == nil || meta.Metered.Tokens() != spent {
				t.Errorf("stored %+v (%v), want %d tokens metered", meta, err, spent)
			}

			r2 := runMetered(t, c.keylessCLI, store, environ, engine.Turn{Prompt: "and now?", Resume: r.res.Conversation},
				func(o *engine.RunOptions) { o.MaxTokens = 10 * bigCall })
			if r2.err != nil {
				t.Fatalf("resume with a larger budget: %v", r2.err)
			}
			if r2.res.Conversation != r.res.Conversation || r2.res.Metered == nil || r2.res.Metered.Requests == 0 {
				t.Errorf("resumed %+v", r2.res)
			}
			if n, _ := calls(); n < 2 {
				t.Errorf("the fake received %d calls after the resume", n)
			}
		})
	}
}

// budgetWorld is one "machine" running the built outpost with claude
// against fake, on the store spec, with its own OUTPOST_HOME and HOME.
func budgetWorld(t *testing.T, spec string, fake *anthropic.Server) *storeWorld {
	return &storeWorld{t: t, kind: "cli", spec: spec, home: t.TempDir(), dir: t.TempDir(), extra: []string{
		"PATH=" + dirOf(testenv.RequireCLI(t, "claude")) + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + fake.URL(), "ANTHROPIC_API_KEY=sk-ant-budget",
	}}
}

// claudeRun runs one claude turn with --json on w's store.
func (w *storeWorld) claudeRun(args ...string) ran {
	w.t.Helper()
	return w.run(append([]string{"--store", w.spec, "--agent", "claude", "--option", claude.OptionMaxRetries + "=0",
		"--option", claude.OptionPermissionMode + "=bypassPermissions"}, args...)...)
}

// wantBudget fails t unless r ended with exit status 11 and code budget
// of kind budget, limit and spent.
func wantBudget(t *testing.T, r ran, budget string, limit, spent int64) {
	t.Helper()
	if r.code != 11 || r.res.Error == nil || r.res.Error.Code != outpost.Budget {
		t.Fatalf("exit %d, result %+v, want 11 and code budget\n%s", r.code, r.res, lastLines(r.stderr))
	}
	d := r.res.Error.Details
	if d["budget"] != budget || d["limit"] != float64(limit) || d["spent"] != float64(spent) {
		t.Errorf("details %v, want budget %s, limit %d, spent %d", d, budget, limit, spent)
	}
	if r.res.Conversation == "" {
		t.Error("the conversation was not stored")
	}
}

// TestRunBudgetCLI: `outpost run --max-tokens N` with the real claude
// exits with status 11 when the call after a tool call would cross it,
// and --resume with a larger --max-tokens continues the conversation.
func TestRunBudgetCLI(t *testing.T) {
	t.Parallel()
	fake := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: bigCall, OutputTokens: 37}})
	w := budgetWorld(t, filepath.Join(t.TempDir(), "store"), fake)
	r := w.claudeRun("--max-tokens", fmt.Sprint(bigCall), "run a command FAKE_TOOL")
	wantBudget(t, r, "turn", bigCall, bigCall+37)
	if n := len(fake.MessageRequests()); n != 1 {
		t.Errorf("the fake received %d calls, want the one before the budget was spent", n)
	}
	r2 := w.claudeRun("--max-tokens", fmt.Sprint(10*bigCall), "--resume", r.res.Conversation, "and now?")
	if r2.code != 0 || r2.res.Conversation != r.res.Conversation {
		t.Fatalf("resume: exit %d, result %+v\n%s", r2.code, r2.res, lastLines(r2.stderr))
	}
}

// TestRunBudgetRefusedTurn: a conversation whose budget has less left
// than Claude Code's next prompt (some 10^4 tokens, estimated): the resume
// is refused at its first call (exit status 11) with a message in the
// figures `outpost usage` shows (what is left, what was used) and why
// (the prompt's estimate); the API is not called, and the refused turn is
// not counted: the conversation keeps its one turn, and the result names
// it to continue.
func TestRunBudgetRefusedTurn(t *testing.T) {
	t.Parallel()
	fake := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: bigCall, OutputTokens: 37}})
	w := budgetWorld(t, filepath.Join(t.TempDir(), "store"), fake)
	const left = 1000
	r := w.claudeRun("--budget", fmt.Sprint(bigCall+37+left), "say hi")
	if r.code != 0 {
		t.Fatalf("first turn: exit %d, result %+v\n%s", r.code, r.res, lastLines(r.stderr))
	}
	calls := len(fake.MessageRequests())
	if calls != 1 {
		t.Fatalf("Claude Code made %d calls for the first turn; the test counts on one", calls)
	}
	r2 := w.claudeRun("--resume", r.res.Conversation, "and now?")
	wantBudget(t, r2, "conversation", bigCall+37+left, bigCall+37)
	if n := len(fake.MessageRequests()); n != calls {
		t.Errorf("the fake received %d calls after the refusal, want none", n-calls)
	}
	d := r2.res.Error.Details
	est, _ := d["estimate"].(float64)
	if d["left"] != float64(left) || est <= left {
		t.Errorf("details %v, want %d left and the refused prompt's estimate above it", d, left)
	}
	want := fmt.Sprintf("the conversation budget of %d tokens has %d tokens left (%d used), fewer than the next model call's prompt needs (about %d tokens)",
		bigCall+37+left, left, bigCall+37, int64(est))
	if !strings.Contains(r2.res.Error.Message, want) {
		t.Errorf("message %q, want it to say %q", r2.res.Error.Message, want)
	}
	if r2.res.Conversation != r.res.Conversation {
		t.Errorf("result conversation %q, want the resumed %q to continue", r2.res.Conversation, r.res.Conversation)
	}
	code, js, errOut := runOutpost(t, w.home, w.dir, "usage", "--json", "--store", w.spec, r.res.Conversation)
	var u struct {
		Turns      int   `json:"turns"`
		Budget     int64 `json:"budget"`
		BudgetLeft int64 `json:"budget_left"`
	}
	if err := json.Unmarshal([]byte(js), &u); code != 0 || err != nil {
		t.Fatalf("usage: exit %d, %v: %s %s", code, err, js, errOut)
	}
	if u.Turns != 1 || u.Budget != bigCall+37+left || u.BudgetLeft != left {
		t.Errorf("usage: %d turns, budget %d, %d left; want 1 turn (the refused one not counted) and %d left, as the refusal said", u.Turns, u.Budget, u.BudgetLeft, left)
	}
	// A person sees the same figures, and how to continue.
	p := w.outpost("run", "--store", w.spec, "--agent", "claude", "--resume", r.res.Conversation, "and now?")
	if p.code != 11 || !strings.Contains(p.stderr, "has 1000 tokens left") || !strings.Contains(p.stderr, "continue with: outpost run --resume "+r.res.Conversation) {
		t.Errorf("exit %d, stderr:\n%s", p.code, p.stderr)
	}
}

// TestRunBudgetAcrossMachines: a conversation's --budget kept in a
// PostgreSQL store two machines share (two outpost processes with their
// own OUTPOST_HOME): the first machine's turn spends part of it, the
// second resumes without --budget and is stopped by the stored budget,
// counting what the first spent (its own turn alone would fit); a
// larger --budget continues it.
func TestRunBudgetAcrossMachines(t *testing.T) {
	t.Parallel()
	fake := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: bigCall, OutputTokens: 37}})
	spec := pgtest.NewDB(t)
	a, b := budgetWorld(t, spec, fake), budgetWorld(t, spec, fake)
	const budget = bigCall * 3 / 2
	r := a.claudeRun("--budget", fmt.Sprint(budget), "say hi")
	if r.code != 0 {
		t.Fatalf("machine a: exit %d, result %+v\n%s", r.code, r.res, lastLines(r.stderr))
	}
	first := len(fake.MessageRequests())
	if first != 1 { // Claude Code made another call: the budget still holds, b is stopped sooner
		for _, q := range fake.MessageRequests() {
			t.Logf("machine a: %s stream=%v messages=%d last user %.100q", q.Model, q.Stream, q.NumMessages, q.LastUserText)
		}
	}
	// b's first call fits what is left (the prompt's estimate is some
	// 10^4 tokens), the one after the tool call does not; b's own calls
	// alone would fit.
	r2 := b.claudeRun("--resume", r.res.Conversation, "run a command FAKE_TOOL")
	total := len(fake.MessageRequests())
	wantBudget(t, r2, "conversation", budget, int64(total)*(bigCall+37))
	if n := total - first; n > 1 || int64(n)*(bigCall+37) >= budget {
		t.Errorf("machine b made %d calls, want at most the one before the budget was spent", n)
	}
	// Either machine's `outpost usage` shows the stored budget spent.
	code, js, errOut := runOutpost(t, a.home, a.dir, "usage", "--json", "--store", spec, r.res.Conversation)
	var u struct {
		Budget     int64           `json:"budget"`
		BudgetLeft int64           `json:"budget_left"`
		Metered    harness.Metered `json:"metered"`
	}
	if err := json.Unmarshal([]byte(js), &u); code != 0 || err != nil {
		t.Fatalf("usage: exit %d, %v: %s %s", code, err, js, errOut)
	}
	if u.Budget != budget || u.BudgetLeft != 0 || u.Metered.Tokens() != int64(total)*(bigCall+37) {
		t.Errorf("usage: budget %d, left %d, metered %+v", u.Budget, u.BudgetLeft, u.Metered)
	}
	// A larger --budget, on either machine, continues the conversation.
	r3 := a.claudeRun("--budget", fmt.Sprint(10*bigCall), "--resume", r.res.Conversation, "and now?")
	if r3.code != 0 || r3.res.Conversation != r.res.Conversation {
		t.Fatalf("resume with a larger budget: exit %d, result %+v\n%s", r3.code, r3.res, lastLines(r3.stderr))
	}
}

// TestDeclarativeMetered: no real preset reports no usage (opencode, qwen
// and aider read it from their CLIs' output), so the real claude CLI is
// described by a preset file that reads none (usage "unavailable") and
// declares its endpoint: with secrets mode env its turn has no usage;
// through the credential gateway (the default) it gains the metered count,
// which equals the fake's, as its usage.
func TestDeclarativeMetered(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "claude")
	file := strings.Replace(claudeFile, "PROGRAM", bin, 1)
	file = strings.Replace(file, `"usage": "events",`, `"usage": "unavailable",
  "endpoint": {"api": "anthropic", "secret": "ANTHROPIC_API_KEY", "base_url": "ANTHROPIC_BASE_URL"},`, 1)
	path := filepath.Join(t.TempDir(), "claude-file.json")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := declarative.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Usage != harness.UsageUnavailable || len(h.Endpoints) != 1 {
		t.Fatalf("usage %q, endpoints %+v", h.Usage, h.Endpoints)
	}
	c := keylessCLI{name: "claude-file", h: h, path: func(*testing.T) string { return filepath.Dir(bin) }}
	for _, mode := range []string{engine.SecretsEnv, engine.SecretsGateway} {
		t.Run(mode, func(t *testing.T) {
			environ, want, calls := meteredCLIs[0].start(t, 0, false)
			r := runMetered(t, c, conversation.NewFS(t.TempDir()), environ, engine.Turn{Prompt: "say hi"},
				func(o *engine.RunOptions) { o.Secrets = mode })
			if r.err != nil {
				t.Fatalf("turn: %v", r.err)
			}
			n, gone := calls()
			if mode == engine.SecretsEnv {
				if r.res.Usage != (harness.Usage{}) || r.res.Metered != nil {
					t.Errorf("usage %+v, metered %+v, want none", r.res.Usage, r.res.Metered)
				}
				return
			}
			if r.res.Metered == nil || r.res.Usage != r.res.Metered.Usage {
				t.Fatalf("usage %+v, metered %+v, want the metered usage", r.res.Usage, r.res.Metered)
			}
			checkMetered(t, r.res.Metered.MeteredUsage, want, n, gone)
		})
	}
}
