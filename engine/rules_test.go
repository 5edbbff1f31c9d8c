package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// One test per rule of the reference (docs/ARCHITECTURE.md, "The harness
// preset"); each fails on the code before the rule was kept.

func echoAgent(mod func(h *harness.Harness)) harness.Agent {
	h := echo.Harness()
	mod(h)
	return harness.Agent{Kind: harness.KindCLI, Harness: h}
}

// Rule 1: an absent Capture saves the conversation as soon as storage
// exists; False avoids it.
func TestRuleCaptureAbsent(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) { h.Capture = harness.Unset })})
	if res.Conversation == "" {
		t.Fatal("a preset with storage and no Capture stored nothing")
	}
	res = f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) { h.Capture = harness.False })})
	if res.Conversation != "" {
		t.Fatalf("Capture false stored %s", res.Conversation)
	}
}

// Rule 2: an absent Forkable allows a fork.
func TestRuleForkableAbsent(t *testing.T) {
	f := newFixture(t)
	a := echoAgent(func(h *harness.Harness) { h.Forkable, h.Resumable = harness.Unset, harness.Unset })
	first := f.ok(engine.Turn{Prompt: "hello", Agent: a})
	child := f.ok(engine.Turn{Prompt: "again", Agent: a, Fork: first.Conversation})
	if child.Parent != first.Conversation || child.Session == first.Session {
		t.Fatalf("fork: %+v", child)
	}
}

// Rule 3: Resumable false refuses continuation and fork before
// allocation, even with Forkable true, with code refused.
func TestRuleResumableFalse(t *testing.T) {
	f := newFixture(t)
	first := f.ok(engine.Turn{Prompt: "hello"})
	opens := f.provider.opens.Load()
	a := echoAgent(func(h *harness.Harness) { h.Resumable, h.Forkable = harness.False, harness.True })
	for _, turn := range []engine.Turn{{Resume: first.Conversation}, {Fork: first.Conversation}} {
		turn.Prompt, turn.Agent = "again", a
		_, err := f.run(turn)
		if outpost.CodeOf(err) != outpost.Refused {
			t.Errorf("resume %q fork %q: %v, want code refused", turn.Resume, turn.Fork, err)
		}
	}
	if n := f.provider.opens.Load(); n != opens {
		t.Errorf("%d sandboxes allocated for refused turns", n-opens)
	}
}

// Rule 4: usage modes. Unavailable records nothing; unset counts what the
// events report without the completeness check; session reports the
// usage command's figure.
func TestRuleUsageModes(t *testing.T) {
	f := newFixture(t)
	incomplete := func(h *harness.Harness) {
		h.Events = func(b []byte) []harness.Event {
			evs := echo.Events(b)
			for i := range evs {
				if evs[i].Usage != nil {
					u := *evs[i].Usage
					u.Complete = false
					evs[i].Usage = &u
				}
			}
			return evs
		}
	}
	res := f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) { h.Usage = harness.UsageUnavailable })})
	if res.Usage != (harness.Usage{}) {
		t.Errorf("unavailable recorded %+v", res.Usage)
	}
	m, err := f.store.Meta(context.Background(), res.Conversation)
	if err != nil || m.Usage != (harness.Usage{}) {
		t.Errorf("unavailable stored %+v (%v)", m.Usage, err)
	}
	res = f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) { incomplete(h); h.Usage = harness.UsageUnset })})
	if res.Usage.InputTokens != 1 || !res.Usage.Complete {
		t.Errorf("unset mode: %+v, want the reported figures without the completeness check", res.Usage)
	}
	res = f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) { incomplete(h); h.Usage = harness.UsageEvents })})
	if res.Usage.InputTokens != 1 || res.Usage.Complete {
		t.Errorf("events mode: %+v, want the reported figures, incomplete", res.Usage)
	}
	var asked atomic.Int32
	res = f.ok(engine.Turn{Prompt: "hello", Agent: echoAgent(func(h *harness.Harness) {
		h.Usage = harness.UsageSession
		h.UsageCommand = func(native string) *harness.Command {
			asked.Add(1)
			return &harness.Command{Path: "sh", Args: []string{"-c", `printf '%s 70 90' "$1"`, "sh", native}}
		}
		h.UsageResult = func(out []byte) *harness.Usage {
			var id string
			var in, outTok int64
			if _, err := fmt.Sscan(string(out), &id, &in, &outTok); err != nil {
				return nil
			}
			return &harness.Usage{InputTokens: in, OutputTokens: outTok, Complete: true}
		}
	})})
	if want := (harness.Usage{InputTokens: 70, OutputTokens: 90, Complete: true}); res.Usage != want || asked.Load() != 1 {
		t.Errorf("session mode: %+v (asked %d times), want %+v", res.Usage, asked.Load(), want)
	}
}

// Rule 5: a Fork hook gets the parent's id and a runner, and returns a
// distinct child id that the turn continues; an empty or unchanged id is
// a process error with the hook's output.
func TestRuleForkHook(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	first := f.ok(engine.Turn{Prompt: "hello"})
	a := echoAgent(func(h *harness.Harness) { h.Fork = echo.Fork(self) })
	child := f.ok(engine.Turn{Prompt: "forked", Agent: a, Fork: first.Conversation})
	if child.Session == "" || child.Session == first.Session || child.Parent != first.Conversation {
		t.Fatalf("fork through the hook: %+v (parent session %s)", child, first.Session)
	}
	if !strings.Contains(child.Text, "(turn 2)") {
		t.Errorf("the child does not continue the parent: %q", child.Text)
	}
	for name, hook := range map[string]func(context.Context, string, harness.Runner) (string, error){
		"parent's id": func(ctx context.Context, parent string, run harness.Runner) (string, error) {
			r, err := run(ctx, harness.Command{Path: "sh", Args: []string{"-c", "echo forking; echo oops >&2"}})
			if err != nil || !r.Status.Success() || string(r.Stdout) != "forking\n" || string(r.Stderr) != "oops\n" {
				return "", fmt.Errorf("runner: %+v %v", r, err)
			}
			return parent, nil
		},
		"empty id": func(ctx context.Context, parent string, run harness.Runner) (string, error) {
			r, err := run(ctx, harness.Command{Path: "sh", Args: []string{"-c", "echo forking; exit 3"}})
			if err != nil || r.Status.Code != 3 {
				return "", fmt.Errorf("runner: %+v %v", r, err)
			}
			return "", nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.run(engine.Turn{Prompt: "x", Agent: echoAgent(func(h *harness.Harness) { h.Fork = hook }), Fork: first.Conversation})
			var oe *outpost.Error
			if outpost.CodeOf(err) != outpost.Process || !errorsAs(err, &oe) || oe.Op != "fork" {
				t.Fatalf("%v, want code process at fork", err)
			}
			if out, _ := oe.Details["fork_stdout"].(string); out != "forking\n" {
				t.Errorf("details %v lack the hook's output", oe.Details)
			}
		})
	}
}

// Rule 6: the credentials hook is called once per preset per lease, and
// the local provider receives only the plan's variables.
func TestRuleCredentialsOncePerLease(t *testing.T) {
	f := newFixture(t)
	lease, err := sandbox.Acquire(context.Background(), f.provider, driver.Options{Workdir: f.workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(context.Background())
	var calls atomic.Int32
	a := echoAgent(func(h *harness.Harness) {
		h.Credentials = func(vars harness.Vars) (harness.Plan, error) {
			calls.Add(1)
			return harness.Plan{
				Variables: map[string]string{echo.TokenVariable: "tok-123456"},
				Files:     []harness.File{{Path: ".echo/credentials", Content: []byte("secret")}},
				Login:     []harness.Command{{Path: "false"}}, // would fail the turn if it ran
			}, nil
		}
	})
	for i := 0; i < 2; i++ {
		res, err := f.run(engine.Turn{Prompt: "#env " + echo.TokenVariable, Agent: a}, func(o *engine.RunOptions) { o.Lease, o.Provider = lease, nil })
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		if !strings.Contains(res.Text, echo.TokenVariable+" is set") {
			t.Errorf("turn %d: the variable did not arrive: %q", i+1, res.Text)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("Credentials called %d times for one lease, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(lease.Home(), ".echo", "credentials")); !os.IsNotExist(err) {
		t.Errorf("the local provider received a generated credential file (%v)", err)
	}
}

// memAgent is a memsandbox program speaking the echo agent's JSON lines.
// It fails unless the files of want exist in its home.
func memAgent(want ...string) memsandbox.Program {
	return func(ctx context.Context, p *memsandbox.Proc) int {
		for _, w := range want {
			if _, err := p.FS.Stat(memsandbox.Home + "/" + w); err != nil {
				fmt.Fprintf(p.Stderr, "agent: %s missing\n", w)
				return 1
			}
		}
		fmt.Fprintln(p.Stdout, `{"type":"init","session":"0f8fad5b-d9cb-469f-a165-70867728950e","model":"m","turn":1}`)
		fmt.Fprintln(p.Stdout, `{"type":"done","text":"ok","usage":{"input":1,"output":1}}`)
		return 0
	}
}

// Rule 7 (and login commands): configuration is applied after
// authentication, that is after the credential files and the login
// commands; a failing login command is a configuration error.
func TestRuleConfigurationAfterLogin(t *testing.T) {
	var logins atomic.Int32
	login := func(ctx context.Context, p *memsandbox.Proc) int {
		logins.Add(1)
		if _, err := p.FS.Stat(memsandbox.Home + "/.cred"); err != nil {
			fmt.Fprintln(p.Stderr, "login: the credential file is not there yet")
			return 1
		}
		if _, err := p.FS.Stat(memsandbox.Home + "/.conf"); err == nil {
			fmt.Fprintln(p.Stderr, "login: the configuration came before authentication")
			return 1
		}
		if err := p.FS.WriteFile(memsandbox.Home+"/.login-done", []byte("ok"), 0o600); err != nil {
			return 1
		}
		return 0
	}
	prov := memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{
		"agent": memAgent(".cred", ".login-done", ".conf"), "login": login,
	}})
	h := &harness.Harness{
		Name:    "mem",
		Request: func(harness.Input) (harness.Command, error) { return harness.Command{Path: "agent"}, nil },
		Events:  echo.Events,
		Credentials: func(harness.Vars) (harness.Plan, error) {
			return harness.Plan{Files: []harness.File{{Path: ".cred", Content: []byte("c")}}, Login: []harness.Command{{Path: "login", Args: []string{"--now"}}}}, nil
		},
		Configuration: func(harness.Vars) (harness.Configuration, error) {
			return harness.Configuration{Files: []harness.File{{Path: ".conf", Content: []byte("{}")}}}, nil
		},
	}
	run := func(h *harness.Harness) (*engine.Result, error) {
		return engine.Run(context.Background(), engine.Turn{Prompt: "hi", Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}}, &engine.RunOptions{Provider: prov, Environ: []string{}})
	}
	res, err := run(h)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if res.Text != "ok" || logins.Load() != 1 {
		t.Errorf("text %q, %d logins", res.Text, logins.Load())
	}
	bad := *h
	bad.Credentials = func(harness.Vars) (harness.Plan, error) {
		return harness.Plan{Login: []harness.Command{{Path: "false"}}}, nil
	}
	_, err = run(&bad)
	var oe *outpost.Error
	if outpost.CodeOf(err) != outpost.Configuration || !errorsAs(err, &oe) || oe.Op != "login" {
		t.Errorf("failing login: %v, want configuration at login", err)
	}
}

// Rule 8: a turn that only retries is an outage once the retry bound
// passes, and retry notices do not feed the inactivity watchdog.
func TestRuleRetryOnly(t *testing.T) {
	f := newFixture(t)
	_, err := f.run(engine.Turn{Prompt: "#retryforever", Timeout: time.Minute,
		Agent: echoAgent(func(h *harness.Harness) { h.RetryBound = 300 * time.Millisecond })},
		func(o *engine.RunOptions) { o.Grace = 100 * time.Millisecond })
	var oe *outpost.Error
	if outpost.CodeOf(err) != outpost.Process || !outpost.UnavailableFault(err) || !errorsAs(err, &oe) || oe.Details["retrying"] != true {
		t.Fatalf("%v, want process with details.unavailable and details.retrying", err)
	}
	if !strings.Contains(oe.Msg, "waiting for network") {
		t.Errorf("message %q does not quote the retry", oe.Msg)
	}
	_, err = f.run(engine.Turn{Prompt: "#retryforever", Timeout: time.Minute, Inactivity: 300 * time.Millisecond, RetryBound: -1},
		func(o *engine.RunOptions) { o.Grace = 100 * time.Millisecond })
	if outpost.CodeOf(err) != outpost.Process || !errorsAs(err, &oe) || oe.Details["stalled"] != true || outpost.UnavailableFault(err) {
		t.Fatalf("%v, want the inactivity watchdog (details.stalled), retries being no activity", err)
	}
}

// Rule 8: Codex with neither a key nor a login fails with configuration
// before any sandbox is allocated.
func TestRuleCodexWithoutCredential(t *testing.T) {
	f := newFixture(t)
	home := t.TempDir() // no .codex/auth.json
	_, err := f.run(engine.Turn{Prompt: "hello", Agent: harness.Agent{Kind: harness.KindCLI, Harness: codex.Harness()}},
		func(o *engine.RunOptions) { o.Environ = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home} })
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "no credential") {
		t.Fatalf("%v, want configuration: no credential", err)
	}
	if n := f.provider.opens.Load(); n != 0 {
		t.Errorf("%d sandboxes allocated", n)
	}
}

// Rule 9: kind is required, and "cli" is its only value.
func TestRuleKindRequired(t *testing.T) {
	f := newFixture(t)
	for _, kind := range []string{"", "api", "CLI"} {
		_, err := f.run(engine.Turn{Prompt: "hello", Agent: harness.Agent{Kind: kind, Harness: echo.Harness()}})
		if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "kind") {
			t.Errorf("kind %q: %v, want configuration", kind, err)
		}
	}
	if n := f.provider.opens.Load(); n != 0 {
		t.Errorf("%d sandboxes allocated", n)
	}
}

// Rule 10: a continuation without a model keeps the conversation's (the
// CLI gets it too); one with a model changes it and records the change.
func TestRuleModelOnResume(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first := f.ok(engine.Turn{Prompt: "hello", Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness(), Model: "echo-2"}})
	res := f.ok(engine.Turn{Prompt: "again", Resume: first.Conversation})
	m, err := f.store.Meta(ctx, first.Conversation)
	if err != nil || m.Model != "echo-2" || res.Model != "echo-2" {
		t.Fatalf("resume without a model: stored %q, result %q (%v), want echo-2", m.Model, res.Model, err)
	}
	if got := sessionModel(f); got != "echo-2" {
		t.Errorf("the CLI ran with model %q, want echo-2", got)
	}
	res = f.ok(engine.Turn{Prompt: "third", Resume: first.Conversation, Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness(), Model: "echo-3"}})
	m, _ = f.store.Meta(ctx, first.Conversation)
	if m.Model != "echo-3" || res.Model != "echo-3" || sessionModel(f) != "echo-3" {
		t.Errorf("resume with a model: stored %q, result %q, want echo-3", m.Model, res.Model)
	}
	if !hasNotice(f, "model") {
		t.Error("no notice records the model change")
	}
	child := f.ok(engine.Turn{Prompt: "fork", Fork: first.Conversation})
	if cm, _ := f.store.Meta(ctx, child.Conversation); cm.Model != "echo-3" {
		t.Errorf("fork without a model: %q, want echo-3", cm.Model)
	}
}

func sessionModel(f *fixture) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.Type == harness.EventSession {
			if m, ok := ev.Details["model"].(string); ok {
				return m
			}
		}
	}
	return ""
}

func hasNotice(f *fixture, kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.Type == harness.EventNotice && ev.Kind == kind {
			return true
		}
	}
	return false
}

// Turn.Command runs another executable in place of the preset's program,
// with no bootstrap.
func TestTurnCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	a := echoAgent(func(h *harness.Harness) {
		h.Bootstrap = ""
		req := h.Request
		h.Request = func(in harness.Input) (harness.Command, error) {
			c, err := req(in)
			c.Path = "no-such-echo-agent"
			return c, err
		}
	})
	if _, err := f.run(engine.Turn{Prompt: "hello", Agent: a}); err == nil {
		t.Fatal("a missing program ran")
	}
	res := f.ok(engine.Turn{Prompt: "hello", Agent: a, Command: self})
	if !strings.Contains(res.Text, "echo: hello") {
		t.Errorf("text %q", res.Text)
	}
	if _, err := f.run(engine.Turn{Prompt: "hello", Command: " x"}); outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("a bad command: %v", err)
	}
}

// The trace: every step with its duration, every event, the
// classification, the end, redacted; and the result's timing.
func TestTraceAndTiming(t *testing.T) {
	f := newFixture(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	before := time.Now().UTC()
	res, err := f.run(engine.Turn{Prompt: "#leak ECHO_API_KEY #outage", Env: map[string]string{"ECHO_API_KEY": "sk-trace-secret-1234"}},
		func(o *engine.RunOptions) { o.Logger = logger })
	if outpost.CodeOf(err) != outpost.Process {
		t.Fatalf("%v", err)
	}
	if res == nil || res.StartedAt.Before(before) || res.CompletedAt.Before(res.StartedAt) || res.DurationMS != res.CompletedAt.Sub(res.StartedAt).Milliseconds() {
		t.Errorf("timing %+v", res)
	}
	if strings.Contains(buf.String(), "sk-trace-secret-1234") {
		t.Error("the trace shows a secret")
	}
	msgs := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("trace line %q: %v", l, err)
		}
		if _, ok := r["time"]; !ok {
			t.Errorf("no time in %s", l)
		}
		msgs[r["msg"].(string)]++
	}
	for _, m := range []string{"step", "event", "classify text", "classify", "end"} {
		if msgs[m] == 0 {
			t.Errorf("no %q record in the trace (%v)", m, msgs)
		}
	}
}

func errorsAs(err error, oe **outpost.Error) bool { return errors.As(err, oe) }
