package acp_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
	"github.com/outposthq/outpost/harness/acp/acptest"
	"github.com/outposthq/outpost/providers/local"
)

func TestMain(m *testing.M) {
	acptest.MaybeRun()
	os.Exit(m.Run())
}

// testPreset is the scripted agent as an ACP preset; the turns run the
// test binary as its program (Turn.Command).
func testPreset(resume bool) *harness.Harness { return acptest.Preset("acpt-agent", resume) }

// env is one local provider and conversation store the engine tests share.
type env struct {
	prov  *local.Provider
	store conversation.Store
	dir   string
}

var (
	envOnce sync.Once
	shared  env
)

func sharedEnv(t *testing.T) env {
	envOnce.Do(func() {
		dir, err := os.MkdirTemp("", "acp-engine-")
		if err != nil {
			t.Fatal(err)
		}
		shared = env{prov: local.New(&local.Options{BaseDir: dir}), store: conversation.NewFS(dir + "/store"), dir: dir}
	})
	return shared
}

type turnOut struct {
	ctx    context.Context // the turn's, when set
	res    *engine.Result
	err    error
	mu     sync.Mutex
	events []harness.Event
}

func (o *turnOut) of(typ harness.EventType, kind string) []harness.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Type == typ && (kind == "" || ev.Kind == kind) {
			out = append(out, ev)
		}
	}
	return out
}

// run runs one turn of the scripted agent through the engine on the local
// sandbox; onEvent sees every event as it comes.
func run(t *testing.T, h *harness.Harness, turn engine.Turn, mod func(*engine.RunOptions, *turnOut)) *turnOut {
	t.Helper()
	e := sharedEnv(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: h}
	turn.Command = self
	if turn.Workdir == "" {
		turn.Workdir = t.TempDir()
	}
	if turn.Timeout == 0 {
		turn.Timeout = time.Minute // a guard against a hang, never reached
	}
	out := &turnOut{}
	o := &engine.RunOptions{Provider: e.prov, Store: e.store, Environ: []string{"PATH=" + os.Getenv("PATH")}, Grace: 5 * time.Second}
	o.OnEvent = func(ev harness.Event) { out.mu.Lock(); out.events = append(out.events, ev); out.mu.Unlock() }
	var stderr strings.Builder
	var stderrMu sync.Mutex
	o.Stderr = writerFunc(func(p []byte) (int, error) { stderrMu.Lock(); defer stderrMu.Unlock(); return stderr.Write(p) })
	if mod != nil {
		mod(o, out)
	}
	ctx := out.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	out.res, out.err = engine.Run(ctx, turn, o)
	if t.Failed() || out.err != nil {
		stderrMu.Lock()
		t.Logf("events: %s\nstderr:\n%s", summary(out.events), stderr.String())
		stderrMu.Unlock()
	}
	return out
}

// TestEngineTurns: text, usage, a plan and a thought, then the same
// conversation resumed (session/load on a fresh process, its replayed
// history not reported), and then through session/resume.
func TestEngineTurns(t *testing.T) {
	t.Parallel()
	h := testPreset(false)
	first := run(t, h, engine.Turn{Prompt: "hello PLAN"}, nil)
	if first.err != nil {
		t.Fatal(first.err)
	}
	want := harness.Usage{InputTokens: 8, OutputTokens: 5, CacheReadTokens: 2, Complete: true}
	if first.res.Text != "echo: hello PLAN (turn 1)" || first.res.Usage != want || first.res.Session == "" {
		t.Errorf("first turn %+v", first.res)
	}
	if len(first.of(harness.EventNotice, "plan")) != 1 || len(first.of(harness.EventReasoning, "")) != 1 || len(first.of(harness.EventSession, "")) != 1 {
		t.Errorf("plan, reasoning and session events missing")
	}
	second := run(t, h, engine.Turn{Prompt: "again", Resume: first.res.Conversation}, nil)
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.res.Text != "echo: again (turn 2)" || second.res.Session != first.res.Session {
		t.Errorf("resumed turn %+v", second.res)
	}
	for _, ev := range second.of(harness.EventMessage, "") {
		if strings.Contains(ev.Text, "HISTORY") {
			t.Errorf("the replayed history was reported: %q", ev.Text)
		}
	}
	third := run(t, testPreset(true), engine.Turn{Prompt: "third", Resume: second.res.Conversation}, nil)
	if third.err != nil || third.res.Text != "echo: third (turn 3)" {
		t.Errorf("session/resume turn: %v %+v", third.err, third.res)
	}
}

// TestEngineToolPermissions: the turn's permissions option answers the
// agent's request: allowed, the tool runs; refused (only read allowed), it
// fails, and a permission_denied notice says so. With permissions=ask
// the caller (RunOptions.Permission) answers: it sees the call and the
// agent's options, and its choice goes back; with no caller, ask refuses.
func TestEngineToolPermissions(t *testing.T) {
	t.Parallel()
	h := testPreset(false)
	for _, c := range []struct {
		perm, answer, text string
		denied             bool
	}{{"", "", "the tool said tool-ran", false}, {"read,search", "", "the tool was refused", true},
		{"ask", "yes", "the tool said tool-ran", false}, {"ask", "no", "the tool was refused", true}, {"ask", "-", "the tool was refused", true}} {
		turn := engine.Turn{Prompt: "run TOOL"}
		if c.perm != "" {
			turn.Options = map[string]string{acp.OptionPermissions: c.perm}
		}
		var asked []harness.Permission
		o := run(t, h, turn, func(ro *engine.RunOptions, _ *turnOut) {
			if c.answer != "-" {
				ro.Permission = func(_ context.Context, p harness.Permission) (string, error) {
					asked = append(asked, p)
					return c.answer, nil
				}
			}
		})
		if o.err != nil {
			t.Fatalf("%q: %v", c.perm, o.err)
		}
		calls, results := o.of(harness.EventToolCall, ""), o.of(harness.EventToolResult, "")
		if len(calls) != 1 || calls[0].Tool.Name != "execute" || len(results) != 1 || results[0].Tool.ID != "call-1" || results[0].Tool.Error != c.denied {
			t.Errorf("%q: tool events %+v %+v", c.perm, calls, results)
		}
		if o.res.Text != c.text || (len(o.of(harness.EventNotice, "permission_denied")) == 1) != c.denied {
			t.Errorf("%q: text %q, denied notices %d", c.perm, o.res.Text, len(o.of(harness.EventNotice, "permission_denied")))
		}
		if wantAsked := c.answer != "" && c.answer != "-"; wantAsked != (len(asked) == 1) ||
			wantAsked && (asked[0].Tool.ID != "call-1" || asked[0].Tool.Name != "execute" || len(asked[0].Options) != 2 || asked[0].Options[1].Kind != "reject_once") {
			t.Errorf("%q %q: the caller was asked %+v", c.perm, c.answer, asked)
		}
	}
}

// TestEngineSteerAndCancel: with steer=interrupt, a message sent while the
// agent works cancels the running prompt and runs as the next one; a
// cancelled turn sends session/cancel and ends cancelled.
func TestEngineSteerAndCancel(t *testing.T) {
	t.Parallel()
	h := testPreset(false)
	steer := make(chan string, 1)
	o := run(t, h, engine.Turn{Prompt: "work SLOW", Options: map[string]string{acp.OptionSteer: "interrupt"}}, func(ro *engine.RunOptions, out *turnOut) {
		ro.Steer = steer
		next := ro.OnEvent
		ro.OnEvent = func(ev harness.Event) {
			next(ev)
			if ev.Type == harness.EventMessage && ev.Text == "working" {
				steer <- "do this instead"
			}
		}
	})
	if o.err != nil || o.res.Text != "echo: do this instead (turn 1)" || o.res.Steered != 1 {
		t.Errorf("steered turn: %v %+v", o.err, o.res)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := run(t, h, engine.Turn{Prompt: "work SLOW"}, func(ro *engine.RunOptions, out *turnOut) {
		next := ro.OnEvent
		ro.OnEvent = func(ev harness.Event) {
			next(ev)
			if ev.Type == harness.EventMessage && ev.Text == "working" {
				cancel()
			}
		}
		out.ctx = ctx
	})
	if outpost.CodeOf(c.err) != outpost.Cancelled || len(c.of(harness.EventFailure, "interrupted")) != 1 {
		t.Errorf("cancelled turn: %v", c.err)
	}
}

// TestEngineFailures: a 429 error response is quota although the agent
// keeps running; an agent that dies mid-prompt is a process failure; a
// huge notification and a line that is not JSON-RPC are survived.
func TestEngineFailures(t *testing.T) {
	t.Parallel()
	h := testPreset(false)
	q := run(t, h, engine.Turn{Prompt: "QUOTA"}, nil)
	if outpost.CodeOf(q.err) != outpost.Quota {
		t.Errorf("429: %v, want quota", q.err)
	}
	x := run(t, h, engine.Turn{Prompt: "EXIT"}, nil)
	if outpost.CodeOf(x.err) != outpost.Process {
		t.Errorf("agent exits mid-prompt: %v, want process", x.err)
	}
	big := run(t, h, engine.Turn{Prompt: "HUGE"}, nil)
	if big.err != nil || len(big.of(harness.EventMessage, "")) < 2 || len(big.of(harness.EventMessage, "")[0].Text) != 1<<20 {
		t.Errorf("huge notification: %v", big.err)
	}
	bad := run(t, h, engine.Turn{Prompt: "BADLINE"}, nil)
	if bad.err != nil || bad.res.Text != "echo: BADLINE (turn 1)" || len(bad.of(harness.EventNotice, "protocol")) != 1 {
		t.Errorf("a line that is not JSON-RPC: %v %+v", bad.err, bad.res)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func summary(evs []harness.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(string(ev.Type))
		if ev.Kind != "" {
			b.WriteString("/" + ev.Kind)
		}
		if t := ev.Text; t != "" {
			if len(t) > 100 {
				t = t[:100] + "…"
			}
			b.WriteString(" " + t)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// TestEngineLingeringAgent: an agent that keeps running once its input
// is closed (claude-code-acp, codex-acp) is stopped a grace period after
// its turn is over, and the turn succeeds.
func TestEngineLingeringAgent(t *testing.T) {
	t.Parallel()
	h := testPreset(false)
	h.Variables["OUTPOST_ACP_TEST_LINGER"] = "1"
	o := run(t, h, engine.Turn{Prompt: "hello"}, func(ro *engine.RunOptions, _ *turnOut) { ro.Grace = time.Second })
	if o.err != nil || o.res.Text != "echo: hello (turn 1)" {
		t.Errorf("lingering agent: %v %+v", o.err, o.res)
	}
}
