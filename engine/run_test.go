package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/testenv"

	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	os.Exit(m.Run())
}

// counting wraps a provider and counts allocations.
type counting struct {
	driver.Provider
	opens atomic.Int32
}

func (c *counting) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	c.opens.Add(1)
	return c.Provider.Open(ctx, o)
}

type fixture struct {
	t        *testing.T
	provider *counting
	store    conversation.Store
	workdir  string
	mu       sync.Mutex
	events   []harness.Event
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureIsolated(t, "")
}

// newFixtureIsolated is newFixture on a local provider with this
// isolation setting ("": the default).
func newFixtureIsolated(t *testing.T, isolation string) *fixture {
	t.Helper()
	return &fixture{
		t:        t,
		provider: &counting{Provider: local.New(&local.Options{BaseDir: t.TempDir(), Isolation: isolation})},
		store:    conversation.NewFS(t.TempDir()),
		workdir:  t.TempDir(),
	}
}

func (f *fixture) run(t engine.Turn, mod ...func(*engine.RunOptions)) (*engine.Result, error) {
	f.mu.Lock()
	f.events = nil
	f.mu.Unlock()
	if t.Agent.Harness == nil {
		t.Agent = harness.Agent{Kind: "cli", Harness: echo.Harness()}
	}
	if t.Workdir == "" {
		t.Workdir = f.workdir
	}
	o := &engine.RunOptions{
		Provider: f.provider,
		Store:    f.store,
		Environ:  []string{"PATH=" + os.Getenv("PATH")},
		OnEvent: func(ev harness.Event) {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
		},
	}
	for _, m := range mod {
		m(o)
	}
	return engine.Run(context.Background(), t, o)
}

func (f *fixture) types() []harness.EventType {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []harness.EventType
	for _, e := range f.events {
		out = append(out, e.Type)
	}
	return out
}

func (f *fixture) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, e := range f.events {
		b.WriteString(e.Text)
		b.WriteString("\n")
		for _, v := range e.Details {
			if s, ok := v.(string); ok {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

func (f *fixture) ok(t engine.Turn, mod ...func(*engine.RunOptions)) *engine.Result {
	f.t.Helper()
	res, err := f.run(t, mod...)
	if err != nil {
		f.t.Fatalf("turn failed: %v", err)
	}
	return res
}

func TestTurnResumeFork(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: "hello"})
	if res.Conversation == "" || res.Session == "" {
		t.Fatalf("no conversation or session: %+v", res)
	}
	if !strings.Contains(res.Text, "hello") || !strings.Contains(res.Text, "turn 1") {
		t.Errorf("final text %q", res.Text)
	}
	got := f.types()
	if len(got) < 3 || got[0] != harness.EventSession || got[len(got)-1] != harness.EventFinished {
		t.Errorf("event types %v", got)
	}
	if !res.Usage.Complete || res.Usage.InputTokens != 1 {
		t.Errorf("usage %+v", res.Usage)
	}
	for _, e := range f.events {
		if e.Conversation != res.Conversation || e.Agent != "echo" || e.Time.IsZero() {
			t.Errorf("event not stamped: %+v", e)
		}
	}
	before, beforeFiles, err := f.store.Get(context.Background(), res.Conversation)
	if err != nil {
		t.Fatal(err)
	}

	// Resume in a fresh sandbox (a new lease): turn 2, same id.
	res2 := f.ok(engine.Turn{Prompt: "again", Resume: res.Conversation})
	if res2.Conversation != res.Conversation || !strings.Contains(res2.Text, "turn 2") {
		t.Errorf("resume: %+v", res2)
	}
	m, _ := f.store.Meta(context.Background(), res.Conversation)
	if m.Turns != 2 {
		t.Errorf("turns = %d, want 2", m.Turns)
	}

	// Fork the one-turn state? Fork the current (two turns): turn 3 under a new id.
	res3 := f.ok(engine.Turn{Prompt: "forked", Fork: res.Conversation})
	if res3.Conversation == res.Conversation || res3.Parent != res.Conversation || !strings.Contains(res3.Text, "turn 3") {
		t.Errorf("fork: %+v", res3)
	}
	if res3.Session == res2.Session {
		t.Errorf("fork kept the native id %s", res3.Session)
	}
	after, afterFiles, _ := f.store.Get(context.Background(), res.Conversation)
	if after.Turns != 2 || after.Native != before.Native || len(afterFiles) != len(beforeFiles) {
		t.Errorf("parent changed by fork: %+v", after)
	}
	// The fork resumes on its own.
	res4 := f.ok(engine.Turn{Prompt: "fork again", Resume: res3.Conversation})
	if !strings.Contains(res4.Text, "turn 4") {
		t.Errorf("fork resume: %q", res4.Text)
	}
}

// TestTurnUnderDevShm: homes under /dev/shm (a TMPDIR there, as some set
// for speed) are ordinary files: the turn captures its conversation and
// resumes it. The kernel-filesystem check once refused every path under
// /dev.
func TestTurnUnderDevShm(t *testing.T) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		testenv.Missing(t, "/dev/shm (a tmpfs on Linux)", "a Linux host or container with /dev/shm")
	}
	base, err := os.MkdirTemp("/dev/shm", "outpost-test-")
	if err != nil {
		testenv.Missing(t, "a writable /dev/shm: "+err.Error(), "a Linux host or container with /dev/shm")
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	f := newFixture(t)
	f.provider = &counting{Provider: local.New(&local.Options{BaseDir: base})}
	res := f.ok(engine.Turn{Prompt: "hello"})
	res2 := f.ok(engine.Turn{Prompt: "again", Resume: res.Conversation})
	if !strings.Contains(res2.Text, "turn 2") {
		t.Errorf("resume under /dev/shm: %q", res2.Text)
	}
}

func TestFailureClasses(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		prompt      string
		code        outpost.Code
		unavailable bool
		detail      string
		turn        engine.Turn
	}{
		{prompt: "#quota", code: outpost.Quota, detail: "resets_at"},
		{prompt: "#outage", code: outpost.Process, unavailable: true},
		{prompt: "#crash", code: outpost.Process, detail: "exit_code"},
		{prompt: "#nofinish", code: outpost.Process, detail: "finished"},
		{prompt: "#slow", code: outpost.Timeout, turn: engine.Turn{Timeout: 300 * time.Millisecond}},
		{prompt: "#hang", code: outpost.Process, detail: "stalled", turn: engine.Turn{Inactivity: 300 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.prompt, func(t *testing.T) {
			turn := c.turn
			turn.Prompt = c.prompt
			_, err := f.run(turn, func(o *engine.RunOptions) { o.Grace = 200 * time.Millisecond })
			if got := outpost.CodeOf(err); got != c.code {
				t.Fatalf("code = %q, want %q (%v)", got, c.code, err)
			}
			if err != nil && strings.Contains(err.Error(), "cret") {
				t.Errorf("the error shows a variable's value: %v", err)
			}
			if got := outpost.UnavailableFault(err); got != c.unavailable {
				t.Errorf("unavailable = %v, want %v (%v)", got, c.unavailable, err)
			}
			var oe *outpost.Error
			errors.As(err, &oe)
			if c.detail != "" {
				if _, ok := oe.Details[c.detail]; !ok {
					t.Errorf("details %v lack %q", oe.Details, c.detail)
				}
			}
			if oe.Agent != "echo" {
				t.Errorf("agent = %q", oe.Agent)
			}
		})
	}
	if n := f.provider.opens.Load(); n != int32(len(cases)) {
		t.Errorf("opens = %d", n)
	}
}

func TestRetryIsANotice(t *testing.T) {
	f := newFixture(t)
	f.ok(engine.Turn{Prompt: "#retry please"})
	found := false
	for _, e := range f.events {
		if e.Type == harness.EventNotice && e.Kind == "retry" {
			found = true
		}
	}
	if !found {
		t.Errorf("no retry notice in %v", f.types())
	}
}

// degradedProvider's sandboxes report a fallback (driver.Degrader).
type degradedProvider struct{ driver.Provider }

func (d degradedProvider) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	sb, err := d.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return degradedSandbox{sb}, nil
}

type degradedSandbox struct{ driver.Sandbox }

func (degradedSandbox) Degraded() error { return errors.New("test: no hello from the init") }

// TestDegradedIsANotice: a sandbox that ran the turn's processes a slower
// way than designed (driver.Degrader) says so in one notice of kind
// degraded naming the sandbox; one that did not gives none.
func TestDegradedIsANotice(t *testing.T) {
	f := newFixture(t)
	count := func() (n int, ev harness.Event) {
		for _, e := range f.events {
			if e.Type == harness.EventNotice && e.Kind == "degraded" {
				n, ev = n+1, e
			}
		}
		return n, ev
	}
	f.ok(engine.Turn{Prompt: "hi"})
	if n, _ := count(); n != 0 {
		t.Errorf("%d degraded notices from a sandbox without a fallback", n)
	}
	f.ok(engine.Turn{Prompt: "hi"}, func(o *engine.RunOptions) { o.Provider = degradedProvider{f.provider} })
	n, ev := count()
	if n != 1 || !strings.Contains(ev.Text, "no hello from the init") || ev.Details["sandbox"] == "" || ev.Details["sandbox"] == nil {
		t.Errorf("%d degraded notices, the last %+v; want one with the reason and the sandbox", n, ev)
	}
}

func TestHostileOutput(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: "#big #badlines"})
	big := false
	for _, e := range f.events {
		if e.Type == harness.EventMessage && len(e.Text) == 8<<20 {
			big = true
		}
	}
	if !big {
		t.Error("the 8 MiB line did not arrive as a message")
	}
	if !strings.Contains(res.Text, "turn 1") {
		t.Errorf("final %q", res.Text)
	}
	// A limit below the line's size drops it with a notice, and the turn goes on.
	f.ok(engine.Turn{Prompt: "#big"}, func(o *engine.RunOptions) { o.MaxLine = 1 << 20 })
	dropped := false
	for _, e := range f.events {
		if e.Type == harness.EventNotice && e.Kind == "line_too_long" {
			dropped = true
		}
	}
	if !dropped {
		t.Error("no line_too_long notice")
	}
}

func TestRefusalsBeforeAllocation(t *testing.T) {
	f := newFixture(t)
	base := f.ok(engine.Turn{Prompt: "seed"})
	f.provider.opens.Store(0)
	mod := func(m func(h *harness.Harness)) harness.Agent {
		h := echo.Harness()
		m(h)
		return harness.Agent{Kind: "cli", Harness: h}
	}
	cases := []struct {
		name string
		turn engine.Turn
		code outpost.Code
	}{
		{"not resumable", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Resumable, h.Forkable = harness.False, harness.False }), Resume: base.Conversation}, outpost.Refused},
		{"not forkable", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Forkable = harness.False }), Fork: base.Conversation}, outpost.Refused},
		{"unknown bootstrap", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Bootstrap = "nope" })}, outpost.Configuration},
		{"clash with provider", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Variables = map[string]string{"HOME": "/x"} })}, outpost.Configuration},
		{"clash through --env", engine.Turn{Env: map[string]string{"XDG_CONFIG_HOME": "/x"}}, outpost.Configuration},
		{"NUL in an --env value", engine.Turn{Env: map[string]string{"ECHO_TOKEN": "se\x00cret"}}, outpost.Configuration},
		{"invalid --env name", engine.Turn{Env: map[string]string{"BAD-NAME": "x"}}, outpost.Configuration},
		{"NUL in a preset variable", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Variables = map[string]string{"ECHO_MODE": "a\x00b"} })}, outpost.Configuration},
		{"missing variable", engine.Turn{Agent: mod(func(h *harness.Harness) {
			h.Credentials = func(harness.Vars) (harness.Plan, error) {
				return harness.Plan{}, &harness.MissingVariableError{Names: []string{"ECHO_API_KEY"}, Why: "required"}
			}
		})}, outpost.Configuration},
		{"unknown conversation", engine.Turn{Resume: "c-does-not-exist"}, outpost.Conversation},
		{"invalid preset", engine.Turn{Agent: mod(func(h *harness.Harness) { h.Request = nil })}, outpost.Configuration},
		{"unknown echo option", engine.Turn{Options: map[string]string{"nope": "1"}}, outpost.Configuration},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.turn.Prompt = "x"
			_, err := f.run(c.turn)
			if got := outpost.CodeOf(err); got != c.code {
				t.Fatalf("code = %q, want %q (%v)", got, c.code, err)
			}
			if err != nil && strings.Contains(err.Error(), "cret") {
				t.Errorf("the error shows a variable's value: %v", err)
			}
		})
	}
	if n := f.provider.opens.Load(); n != 0 {
		t.Errorf("%d sandboxes allocated by refused turns", n)
	}
}

// TestUnknownConversationMessage: resuming a conversation the store does
// not have names it once and says not found, the code once, without the
// stores' own prefixes stacked ("conversation X: conversation: conversation: ...").
func TestUnknownConversationMessage(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"c01m8vhsts85mkp3mp35cnb", "not-an-id"} {
		_, err := f.run(engine.Turn{Prompt: "x", Resume: id})
		if !errors.Is(err, conversation.ErrNotFound) || outpost.CodeOf(err) != outpost.Conversation {
			t.Fatalf("resume %s: %v, want code conversation and ErrNotFound", id, err)
		}
		if want := "conversation: locate: " + id + ": not found"; err.Error() != want {
			t.Errorf("resume %s: %q, want %q", id, err, want)
		}
	}
}

func TestDotEnvReachesAgentAndIsRedacted(t *testing.T) {
	f := newFixture(t)
	const secret = "sk-echo-7f3a9c1e5b"
	os.MkdirAll(filepath.Join(f.workdir, ".outpost"), 0o700)
	os.WriteFile(filepath.Join(f.workdir, ".outpost", ".env"), []byte("ECHO_API_KEY="+secret+"\n"), 0o600)
	res := f.ok(engine.Turn{Prompt: "#env ECHO_API_KEY"})
	if !strings.Contains(res.Text, "ECHO_API_KEY is set (18 bytes)") {
		t.Errorf("variable did not reach the agent: %q", res.Text)
	}
	var stderr strings.Builder
	res = f.ok(engine.Turn{Prompt: "#leak ECHO_API_KEY"}, func(o *engine.RunOptions) { o.Raw = true; o.Stderr = &stderr })
	all := f.text() + res.Text + stderr.String()
	for _, e := range f.events {
		all += string(e.Raw)
	}
	if strings.Contains(all, secret) {
		t.Errorf("secret leaked: %q", all)
	}
	if !strings.Contains(res.Text, "[REDACTED]") {
		t.Errorf("no redaction marker in %q", res.Text)
	}
	// The host environment does not leak in wholesale.
	res = f.ok(engine.Turn{Prompt: "#env OUTPOST_HOST_ONLY"}, func(o *engine.RunOptions) {
		o.Environ = append(o.Environ, "OUTPOST_HOST_ONLY=1")
	})
	if !strings.Contains(res.Text, "OUTPOST_HOST_ONLY is not set") {
		t.Errorf("host variable leaked: %q", res.Text)
	}
}

func TestEventsStreamWhileRunningAndCancel(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &engine.RunOptions{Provider: f.provider, Store: f.store, Grace: 200 * time.Millisecond,
		OnEvent: func(ev harness.Event) {
			if ev.Type == harness.EventMessage && ev.Delta {
				cancel() // only possible if events arrive before the agent ends
			}
		}}
	_, err := engine.Run(ctx, engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "#slow=100000", Workdir: f.workdir}, o)
	if outpost.CodeOf(err) != outpost.Cancelled {
		t.Fatalf("code = %q (%v)", outpost.CodeOf(err), err)
	}
}

func TestSteering(t *testing.T) {
	for _, liveInput := range []bool{true, false} {
		name := map[bool]string{true: "live", false: "resume"}[liveInput]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			h := echo.Harness()
			if !liveInput {
				h.LiveInput = nil
			}
			steer := make(chan string, 1)
			var once sync.Once
			res, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "#slow=100000"}, func(o *engine.RunOptions) {
				o.Steer = steer
				o.Grace = 200 * time.Millisecond
				inner := o.OnEvent
				o.OnEvent = func(ev harness.Event) {
					inner(ev)
					if ev.Type == harness.EventMessage && ev.Delta {
						once.Do(func() { steer <- "change course" })
					}
				}
			})
			if liveInput {
				// The live turn goes on after the message; stop it by closing the channel? It ends after #slow steps.
			}
			if err != nil {
				t.Fatalf("steered turn failed: %v", err)
			}
			if res.Steered != 1 {
				t.Errorf("steered = %d", res.Steered)
			}
			want := map[bool]string{true: "steered: change course", false: "change course (turn 2)"}[liveInput]
			if !strings.Contains(res.Text, want) {
				t.Errorf("final %q lacks %q", res.Text, want)
			}
		})
	}
}

// TestMisconfigured: a failure the preset recognizes as refused credentials
// ends with code configuration, not process; quota still wins.
func TestMisconfigured(t *testing.T) {
	f := newFixture(t)
	h := echo.Harness()
	h.Misconfigured = func(text string) bool {
		return strings.Contains(text, "simulated crash") || strings.Contains(text, "usage limit")
	}
	_, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "#crash"})
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Configuration || oe.Details["agent_reported"] != true {
		t.Fatalf("error %v, want configuration reported by the agent", err)
	}
	if _, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "#quota"}); outpost.CodeOf(err) != outpost.Quota {
		t.Errorf("quota text: %v", err)
	}
	if _, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "fine"}); err != nil {
		t.Errorf("a successful turn failed: %v", err)
	}
}

// pullingProvider's Open reports an image pull (driver.Options.Progress)
// before it opens the sandbox, as the docker provider does.
type pullingProvider struct{ driver.Provider }

func (p pullingProvider) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	if o.Progress != nil {
		o.Progress(driver.Progress{Step: driver.ProgressPull, Image: "node:22-bookworm"})
		o.Progress(driver.Progress{Step: driver.ProgressPull, Image: "node:22-bookworm", Layers: 2, LayersDone: 1, Bytes: 50, Total: 100})
		o.Progress(driver.Progress{Step: driver.ProgressPull, Image: "node:22-bookworm", Layers: 2, LayersDone: 2, Bytes: 100, Total: 100, Done: true})
	}
	return p.Provider.Open(ctx, o)
}

// TestImageProgressNotices: a provider's image pull reaches the turn's
// events as notices of kind image, with the turn's agent and
// conversation, the bytes and the layers, before the session starts.
func TestImageProgressNotices(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: "hi"}, func(o *engine.RunOptions) { o.Provider = pullingProvider{f.provider} })
	var got []harness.Event
	session, lastImage := -1, -1
	for i, e := range f.events {
		if e.Type == harness.EventNotice && e.Kind == "image" {
			got, lastImage = append(got, e), i
		}
		if e.Type == harness.EventSession && session < 0 {
			session = i
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d image notices, want 3: %v", len(got), f.types())
	}
	mid, last := got[1], got[2]
	if mid.Agent != "echo" || mid.Conversation != res.Conversation || mid.Details["bytes"] != float64(50) ||
		mid.Details["layers"] != float64(2) || mid.Details["layers_done"] != float64(1) || mid.Details["image"] != "node:22-bookworm" {
		t.Errorf("notice %+v", mid)
	}
	if want := "pulling node:22-bookworm: 50 B of 100 B (50%), 1 of 2 layers"; mid.Text != want {
		t.Errorf("text %q, want %q", mid.Text, want)
	}
	if last.Details["done"] != true || last.Text != "pulled node:22-bookworm (2 layers, 100 B downloaded)" {
		t.Errorf("last notice %+v", last)
	}
	if session >= 0 && lastImage > session {
		t.Error("an image notice came after the session started")
	}
}

// TestChosenID: a new turn with Turn.ID stores its conversation under that
// id (as `outpost acp` names a session before its first prompt); the id
// of a stored conversation, an invalid one, or one beside a resume are
// refused before any sandbox.
func TestChosenID(t *testing.T) {
	f := newFixture(t)
	id := conversation.NewID()
	res, err := f.run(engine.Turn{Prompt: "hi", ID: id})
	if err != nil || res.Conversation != id {
		t.Fatalf("turn with ID %s: conversation %q, %v", id, res.Conversation, err)
	}
	if _, err := f.store.Meta(context.Background(), id); err != nil {
		t.Fatalf("not stored under the chosen id: %v", err)
	}
	opens := f.provider.opens.Load()
	for _, bad := range []engine.Turn{{Prompt: "hi", ID: id}, {Prompt: "hi", ID: "Not An Id"}, {Prompt: "hi", ID: conversation.NewID(), Resume: id}} {
		if _, err := f.run(bad); outpost.CodeOf(err) != outpost.Configuration {
			t.Errorf("turn %+v: %v, want configuration", bad, err)
		}
	}
	if n := f.provider.opens.Load(); n != opens {
		t.Errorf("refused turns opened %d sandboxes", n-opens)
	}
	// Cancelled while the id is checked: cancelled, not conversation.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = engine.Run(ctx, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: echo.Harness()}, Prompt: "hi", Workdir: f.workdir, ID: conversation.NewID()},
		&engine.RunOptions{Provider: f.provider, Store: f.store})
	if outpost.CodeOf(err) != outpost.Cancelled {
		t.Errorf("a cancelled turn with an ID: %v, want cancelled", err)
	}
}

// TestKeep: a turn that succeeded hands its sandbox to Keep instead of
// releasing it, and a resumed turn runs on it as Lease; a turn that
// failed releases its own, and Keep is not called.
func TestKeep(t *testing.T) {
	f := newFixture(t)
	var kept *sandbox.Lease
	keep := func(o *engine.RunOptions) { o.Keep = func(l *sandbox.Lease) { kept = l } }
	first := f.ok(engine.Turn{Prompt: "hello"}, keep)
	if kept == nil {
		t.Fatal("Keep was not called after a turn that succeeded")
	}
	if kept.Vanished(context.Background()) {
		t.Fatal("the kept sandbox was released")
	}
	second := f.ok(engine.Turn{Prompt: "again", Resume: first.Conversation}, func(o *engine.RunOptions) { o.Provider, o.Lease = nil, kept })
	if second.Conversation != first.Conversation || !strings.Contains(second.Text, "(turn 2)") {
		t.Fatalf("the turn on the kept sandbox: %+v", second)
	}
	if n := f.provider.opens.Load(); n != 1 {
		t.Fatalf("%d sandboxes opened, want the first turn's alone", n)
	}
	if err := kept.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	kept = nil
	if _, err := f.run(engine.Turn{Prompt: "#crash"}, keep); err == nil {
		t.Fatal("#crash: no error")
	}
	if kept != nil {
		t.Fatal("Keep was called after a turn that failed")
	}
}
