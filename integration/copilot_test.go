package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
)

// copilotKey is the BYOK API key the tests give Copilot; the fake also
// quotes it back in one reply, so the tests prove it is redacted from
// everything outpost hands the caller.
const copilotKey = "copilot-byok-key-5f3a9c"

// copilotModel is the BYOK model name (COPILOT_MODEL).
const copilotModel = "gpt-4.1"

// Markers the copilot tests' fake answers, beside openai.Markers. With
// Retry-After: 0 the CLI's five retries take about a second each, so a
// terminal failure takes ~6 s instead of 16–60 s.
const (
	markerFast429 = "CP_FAST_429"
	markerFast500 = "CP_FAST_500"
	markerLeak    = "CP_LEAK_KEY"
)

func copilotChoice(req *openai.Request) openai.Scenario {
	switch {
	case strings.Contains(req.LastUserText, markerFast429):
		return openai.RateLimited().WithRetryAfter("0")
	case strings.Contains(req.LastUserText, markerFast500):
		return openai.HTTPError(http.StatusInternalServerError, openai.Body500).WithRetryAfter("0")
	case strings.Contains(req.LastUserText, markerLeak):
		return openai.Text("the key is " + copilotKey + " indeed")
	}
	return openai.Scenario{}
}

// copilotPkgCache is where every copilot of the tests unpacks its package
// (COPILOT_PKG_CACHE_HOME): shared, so only the first run pays ~1.3 s.
func copilotPkgCache() string { return filepath.Join(testenv.Cache(), "copilot-pkg") }

// copilotBinDir returns a directory holding "copilot": a link to the
// pinned CLI's native binary (the npm shim would need node on PATH).
func copilotBinDir(t testing.TB) string {
	t.Helper()
	shim := testenv.RequireCLI(t, "copilot")
	native := filepath.Join(filepath.Dir(filepath.Dir(shim)), "@github", "copilot-linux-x64", "copilot")
	if _, err := os.Stat(native); err != nil {
		testenv.Missing(t, native, "scripts/install-clis.sh copilot (on linux-x64)")
	}
	dir := t.TempDir()
	if err := os.Symlink(native, filepath.Join(dir, "copilot")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copilotEnv is the real Copilot CLI run by outpost (local provider)
// against the fake Chat Completions API in BYOK offline mode.
type copilotEnv struct {
	t       *testing.T
	binDir  string
	fake    *openai.Server
	base    string // the current provider's lease directory
	prov    driver.Provider
	store   *conversation.FS
	workdir string
	environ []string
	marker  string // in every prompt: finds the turns' processes
}

func newCopilotEnv(t *testing.T) *copilotEnv {
	t.Helper()
	e := &copilotEnv{t: t, binDir: copilotBinDir(t), store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	e.marker = fmt.Sprintf("outpost-copilot-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	e.fake = openai.Start(t, openai.Config{Choose: copilotChoice})
	e.environ = []string{
		"COPILOT_OFFLINE=true",
		"COPILOT_PROVIDER_BASE_URL=" + e.fake.URL(),
		"COPILOT_PROVIDER_API_KEY=" + copilotKey,
		"COPILOT_MODEL=" + copilotModel,
		"COPILOT_PKG_CACHE_HOME=" + copilotPkgCache(),
		// Not passed: the host's GitHub token never reaches the agent in
		// BYOK tests, and a classic one would make the CLI refuse to run.
		"HOME=" + os.Getenv("HOME"),
	}
	e.fresh()
	t.Cleanup(func() { copilotNoProcess(t, e.marker) })
	return e
}

// fresh makes the next turns run on a new provider whose leases share
// nothing with the previous ones but the store.
func (e *copilotEnv) fresh() {
	e.base = e.t.TempDir()
	path := e.binDir + string(os.PathListSeparator) + os.Getenv("PATH")
	e.prov = local.New(&local.Options{BaseDir: e.base, Environ: []string{"PATH=" + path, "LANG=C.UTF-8"}})
}

// copilotTurn is one outpost turn of the copilot preset and what it
// produced.
type copilotTurn struct {
	res    *engine.Result
	err    error
	events []harness.Event
	stderr string
}

func (tr copilotTurn) of(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range tr.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *copilotEnv) run(t engine.Turn) copilotTurn {
	e.t.Helper()
	if t.Agent.Harness == nil {
		t.Agent = harness.Agent{Kind: "cli", Harness: copilot.Harness()}
	}
	if t.Workdir == "" {
		t.Workdir = e.workdir
	}
	t.Prompt += " [" + e.marker + "]"
	if t.Timeout == 0 {
		t.Timeout = 2 * time.Minute
	}
	var mu sync.Mutex
	var out copilotTurn
	var stderr lockedBuffer
	o := &engine.RunOptions{Provider: e.prov, Store: e.store, Environ: e.environ, Stderr: &stderr, Grace: 2 * time.Second, Raw: true,
		OnEvent: func(ev harness.Event) {
			mu.Lock()
			out.events = append(out.events, ev)
			mu.Unlock()
		}}
	out.res, out.err = engine.Run(context.Background(), t, o)
	out.stderr = stderr.String()
	copilotNoSecret(e.t, out)
	if e.t.Failed() {
		e.t.Logf("copilot stderr:\n%s", out.stderr)
	}
	return out
}

// copilotNoSecret fails when the BYOK key appears in anything outpost gave
// the caller: events (raw lines included), result, error and its details,
// the agent's stderr.
func copilotNoSecret(t *testing.T, tr copilotTurn) {
	t.Helper()
	b, _ := json.Marshal(struct {
		Events []harness.Event
		Result *engine.Result
	}{tr.events, tr.res})
	if bytes.Contains(b, []byte(copilotKey)) {
		t.Errorf("the API key appears in the events or result")
	}
	if tr.err != nil {
		var oe *outpost.Error
		d := []byte(nil)
		if errors.As(tr.err, &oe) {
			d, _ = json.Marshal(oe.Details)
		}
		if strings.Contains(tr.err.Error(), copilotKey) || bytes.Contains(d, []byte(copilotKey)) {
			t.Errorf("the API key appears in the error or its details")
		}
	}
	if strings.Contains(tr.stderr, copilotKey) {
		t.Errorf("the API key appears on the agent's stderr")
	}
}

// copilotNoProcess fails when a process whose command line holds marker
// (the prompt is an argument) still runs.
func copilotNoProcess(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
			if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
				continue
			}
			if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && bytes.Contains(st, []byte(") Z ")) {
				continue // a zombie is not running
			}
			left = append(left, filepath.Base(d))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("copilot processes still running after the turn: pids %v", left)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// perCall is the usage of one fake reply as outpost reports it: the
// fake's input tokens include the cached ones, outpost's do not.
var perCall = harness.Usage{
	InputTokens:     int64(openai.DefaultUsage.InputTokens - openai.DefaultUsage.CachedTokens),
	OutputTokens:    int64(openai.DefaultUsage.OutputTokens),
	CacheReadTokens: int64(openai.DefaultUsage.CachedTokens),
	Complete:        true,
}

func times(u harness.Usage, n int64) harness.Usage {
	return harness.Usage{InputTokens: u.InputTokens * n, OutputTokens: u.OutputTokens * n, CacheReadTokens: u.CacheReadTokens * n, CacheWriteTokens: u.CacheWriteTokens * n, Complete: u.Complete}
}

// TestCopilot runs the pinned Copilot CLI through the engine against the
// fake. The subtests run in parallel, each with its own fake and sandboxes;
// the two failures are the slow ones (~6 s each: five retries).
func TestCopilot(t *testing.T) {
	t.Parallel()
	copilotBinDir(t) // skip or fail once, not per subtest
	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		tr := e.run(engine.Turn{Prompt: "Say hello"})
		if tr.err != nil {
			t.Fatalf("turn failed: %v", tr.err)
		}
		if tr.res.Text != openai.DefaultText {
			t.Errorf("text %q, want %q", tr.res.Text, openai.DefaultText)
		}
		if len(tr.events) == 0 || tr.events[0].Type != harness.EventSession || !copilot.ValidSessionID(tr.events[0].Session) || tr.events[0].Session != tr.res.Session {
			t.Errorf("the first event is not the minted session: %+v (result session %q)", tr.events[:min(1, len(tr.events))], tr.res.Session)
		}
		for _, ev := range tr.events {
			if ev.Session != tr.res.Session {
				t.Errorf("%s event without the session id: %q", ev.Type, ev.Session)
				break
			}
		}
		if len(tr.of(harness.EventFinished)) != 1 {
			t.Errorf("finished events: %d", len(tr.of(harness.EventFinished)))
		}
		if tr.res.Usage != perCall {
			t.Errorf("usage %+v, want the fake's %+v", tr.res.Usage, perCall)
		}
		reqs := e.fake.Requests()
		if len(reqs) != 1 || reqs[0].API != openai.APIChat || reqs[0].BearerToken() != copilotKey {
			t.Errorf("the fake got %d requests (api %v), want one Chat Completions request with the key", len(reqs), reqs)
		}
		if tr.res.Conversation == "" {
			t.Fatal("nothing stored")
		}
		m, files, err := e.store.Get(context.Background(), tr.res.Conversation)
		if err != nil {
			t.Fatal(err)
		}
		if m.Native != tr.res.Session || m.Usage != perCall {
			t.Errorf("stored meta %+v", m)
		}
		var names []string
		for _, f := range files {
			names = append(names, f.Path)
		}
		if !containsString(names, copilot.EventsFile(tr.res.Session)) {
			t.Errorf("stored files %v lack the session log", names)
		}
	})

	t.Run("Tool", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		tr := e.run(engine.Turn{Prompt: "Run a command FAKE_TOOL"})
		if tr.err != nil {
			t.Fatalf("turn failed: %v", tr.err)
		}
		calls, results := tr.of(harness.EventToolCall), tr.of(harness.EventToolResult)
		if len(calls) != 1 || calls[0].Tool.Name != "bash" || !strings.Contains(string(calls[0].Tool.Input), "echo hi") {
			t.Fatalf("tool calls %+v", calls)
		}
		if len(results) != 1 || results[0].Tool.ID != calls[0].Tool.ID || results[0].Tool.Error || !strings.Contains(results[0].Tool.Output, "hi") {
			t.Errorf("tool results %+v", results)
		}
		// "echo hi; echo bye >&2": the two streams interleave either way.
		if !strings.HasPrefix(tr.res.Text, "Tool output was: ") || !strings.Contains(tr.res.Text, "hi") || !strings.Contains(tr.res.Text, "bye") {
			t.Errorf("text %q", tr.res.Text)
		}
		if want := times(perCall, 2); tr.res.Usage != want {
			t.Errorf("usage %+v, want two calls: %+v", tr.res.Usage, want)
		}
		if n := e.fake.Count(); n != 2 {
			t.Errorf("the fake got %d requests, want 2", n)
		}
	})

	t.Run("ResumeOnAFreshSandbox", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		first := e.run(engine.Turn{Prompt: "First turn FAKE_ECHO"})
		if first.err != nil {
			t.Fatalf("first turn: %v", first.err)
		}
		e.fresh()
		second := e.run(engine.Turn{Prompt: "Second turn FAKE_ECHO", Resume: first.res.Conversation})
		if second.err != nil {
			t.Fatalf("resumed turn: %v", second.err)
		}
		if second.res.Session != first.res.Session || second.res.Conversation != first.res.Conversation {
			t.Errorf("session %q conversation %q, want %q %q", second.res.Session, second.res.Conversation, first.res.Session, first.res.Conversation)
		}
		reqs := e.fake.Requests()
		last := reqs[len(reqs)-1]
		// system, first user message, first answer, second user message.
		if last.NumInput != 4 || len(last.UserTexts) != 2 || !strings.Contains(last.UserTexts[0], "First turn") || !strings.Contains(last.LastUserText, "Second turn") {
			t.Errorf("the resumed request had %d messages, user texts %q: the history did not come back", last.NumInput, last.UserTexts)
		}
		if !strings.HasPrefix(second.res.Text, "ECHO nmsg=4 ") {
			t.Errorf("text %q", second.res.Text)
		}
		if second.res.Usage != perCall {
			t.Errorf("resumed turn usage %+v, want this turn's only: %+v", second.res.Usage, perCall)
		}
		if want := times(perCall, 2); second.res.ThreadUsage == nil || *second.res.ThreadUsage != want {
			t.Errorf("thread usage %+v, want %+v", second.res.ThreadUsage, want)
		}
		m, _, err := e.store.Get(context.Background(), first.res.Conversation)
		if err != nil {
			t.Fatal(err)
		}
		if m.Turns != 2 || m.Usage != times(perCall, 2) {
			t.Errorf("stored turns %d usage %+v", m.Turns, m.Usage)
		}
	})

	t.Run("ForkRefusedBeforeAllocation", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		first := e.run(engine.Turn{Prompt: "Say hello"})
		if first.err != nil {
			t.Fatalf("first turn: %v", first.err)
		}
		e.fresh()
		tr := e.run(engine.Turn{Prompt: "fork it", Fork: first.res.Conversation})
		if code := outpost.CodeOf(tr.err); code != outpost.Refused {
			t.Fatalf("fork: code %q (%v), want refused", code, tr.err)
		}
		if tr.res != nil || len(tr.events) != 0 {
			t.Errorf("a refused fork produced a result or events: %+v %d", tr.res, len(tr.events))
		}
		if entries, _ := os.ReadDir(e.base); len(entries) != 0 {
			t.Errorf("a sandbox was allocated for a refused fork: %d entries in %s", len(entries), e.base)
		}
		if n := e.fake.Count(); n != 1 {
			t.Errorf("the fake got %d requests, want only the first turn's", n)
		}
	})

	t.Run("RateLimitIsQuota", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		tr := e.run(engine.Turn{Prompt: "x " + markerFast429})
		var oe *outpost.Error
		if !errors.As(tr.err, &oe) || oe.Code != outpost.Quota {
			t.Fatalf("err %v, want code quota", tr.err)
		}
		if r, _ := oe.Details["resets_at"].(string); r == "" {
			// The 429 body says "Please try again in 1s.".
			t.Errorf("no resets_at in %v", oe.Details)
		} else if _, err := time.Parse(time.RFC3339, r); err != nil {
			t.Errorf("resets_at %q: %v", r, err)
		}
		if outpost.UnavailableFault(tr.err) {
			t.Error("a rate limit is not an outage")
		}
		if tr.res == nil || tr.res.Exit == nil || tr.res.Exit.Code != 1 {
			t.Errorf("result %+v", tr.res)
		}
		retries := 0
		for _, n := range tr.of(harness.EventNotice) {
			if n.Kind == "retry" {
				retries++
			}
		}
		if retries != 5 || e.fake.Count() != 6 {
			t.Errorf("%d retry notices, %d requests; want 5 and 6", retries, e.fake.Count())
		}
		if f := tr.of(harness.EventFailure); len(f) != 1 || f[0].Kind != "rate_limit" {
			t.Errorf("failure events %+v", f)
		}
		if tr.res != nil && tr.res.Conversation == "" {
			t.Error("the failed turn's conversation was not captured")
		}
	})

	t.Run("ServerErrorIsUnavailable", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		tr := e.run(engine.Turn{Prompt: "x " + markerFast500})
		if code := outpost.CodeOf(tr.err); code != outpost.Process {
			t.Fatalf("err %v, want code process", tr.err)
		}
		if !outpost.UnavailableFault(tr.err) {
			t.Errorf("a 5xx is an outage: %v", tr.err)
		}
		if !strings.Contains(tr.err.Error(), "500") {
			t.Errorf("the error does not say what failed: %v", tr.err)
		}
	})

	t.Run("SecretIsRedacted", func(t *testing.T) {
		t.Parallel()
		e := newCopilotEnv(t)
		tr := e.run(engine.Turn{Prompt: "what is the key " + markerLeak})
		if tr.err != nil {
			t.Fatalf("turn failed: %v", tr.err)
		}
		if !strings.HasPrefix(tr.res.Text, "the key is ") || strings.Contains(tr.res.Text, copilotKey) {
			t.Errorf("text %q: the reply that quotes the key must be redacted", tr.res.Text)
		}
	})
}

// TestCopilotCLI runs `outpost run --agent copilot --json` on the built
// binary: the preset is registered and its result line carries the usage.
func TestCopilotCLI(t *testing.T) {
	t.Parallel()
	binDir := copilotBinDir(t)
	fake := openai.Start(t, openai.Config{})
	home, dir := t.TempDir(), t.TempDir()
	cmd := []string{"run", "--agent", "copilot", "--json", "Say hello"}
	env := []string{
		"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + fake.URL(), "COPILOT_PROVIDER_API_KEY=" + copilotKey,
		"COPILOT_MODEL=" + copilotModel, "COPILOT_PKG_CACHE_HOME=" + copilotPkgCache(),
	}
	code, out, errOut := runOutpostEnv(t, home, dir, env, cmd...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Type  string
		Text  string
		Usage harness.Usage
		Agent string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatal(err)
	}
	if res.Type != "result" || res.Agent != "copilot" || res.Text != openai.DefaultText || res.Usage != perCall {
		t.Errorf("result line %s", lines[len(lines)-1])
	}
	if strings.Contains(out+errOut, copilotKey) {
		t.Error("the API key appears in outpost's output")
	}
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// BenchmarkCopilotTurn is one "Say hello" turn of the pinned Copilot CLI
// against the fake Chat Completions API, run directly and through outpost
// (docs/benchmarks.md, "Copilot"):
//
//	COUNT=8 BENCHTIME=5x PKGS=./integration scripts/bench.sh BenchmarkCopilotTurn
//
// Both share COPILOT_PKG_CACHE_HOME, so neither pays the CLI's unpacking.
func BenchmarkCopilotTurn(b *testing.B) {
	binDir := copilotBinDir(b)
	fake := openai.Start(b, openai.Config{})
	byok := []string{
		"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + fake.URL(), "COPILOT_PROVIDER_API_KEY=" + copilotKey,
		"COPILOT_MODEL=" + copilotModel, "COPILOT_PKG_CACHE_HOME=" + copilotPkgCache(),
	}
	path := binDir + ":/usr/local/bin:/usr/bin:/bin"
	b.Run("direct", func(b *testing.B) {
		wd := b.TempDir()
		for b.Loop() {
			home := b.TempDir()
			id, err := copilot.NewSessionID()
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(binDir, "copilot"), "--prompt=Say hello", "--output-format", "json", "--no-auto-update", "--no-ask-user",
				"--session-id="+id, "--allow-all-tools")
			cmd.Dir = wd
			cmd.Env = append([]string{"PATH=" + path, "HOME=" + home, "TMPDIR=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
				"COPILOT_HOME=" + filepath.Join(home, ".copilot"), "COPILOT_AUTO_UPDATE=false"}, byok...)
			out, err := cmd.Output()
			if err != nil || !bytes.Contains(out, []byte(`"type":"result"`)) {
				b.Fatalf("copilot: %v\n%s", err, out)
			}
		}
	})
	b.Run("outpost", func(b *testing.B) {
		p := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + path}})
		store := conversation.NewFS(b.TempDir())
		wd := b.TempDir()
		o := &engine.RunOptions{Provider: p, Store: store, Environ: byok}
		h := copilot.Harness()
		for b.Loop() {
			res, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "Say hello", Workdir: wd}, o)
			if err != nil || res.Text != openai.DefaultText || res.Usage != perCall {
				b.Fatalf("turn: %v %+v", err, res)
			}
		}
	})
}

// TestCopilotDocker runs the real Copilot CLI in containers of the Debian
// test image, which has no copilot: the bootstrap step installs the pinned
// native package (from the host cache once it has been downloaded), and
// the turns reach the fake on the host's loopback (host network). A text
// turn, then its resume in a fresh container. Each container unpacks the
// CLI's package into its own home (COPILOT_PKG_CACHE_HOME would need a
// shared volume, which the provider does not offer), a few seconds each.
func TestCopilotDocker(t *testing.T) {
	t.Parallel()
	testenv.RequireCLI(t, "copilot") // the same pin; its download is the bootstrap's
	dockertest.Require(t, dockertest.Debian)
	fake := openai.Start(t, openai.Config{})
	prov := dockertest.Provider(t, dockertest.Debian, func(o *docker.Options) {
		o.Network = "host"
		o.Binary = outpostBinary(t)
	})
	store := conversation.NewFS(t.TempDir())
	environ := []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + fake.URL(), "COPILOT_PROVIDER_API_KEY=" + copilotKey, "COPILOT_MODEL=" + copilotModel}
	run := func(turn engine.Turn) copilotTurn {
		t.Helper()
		turn.Agent = harness.Agent{Kind: "cli", Harness: copilot.Harness()}
		turn.Workdir, turn.Timeout = t.TempDir(), 3*time.Minute
		var out copilotTurn
		var mu sync.Mutex
		out.res, out.err = engine.Run(context.Background(), turn, &engine.RunOptions{Provider: prov, Store: store, Environ: environ,
			OnEvent: func(ev harness.Event) { mu.Lock(); out.events = append(out.events, ev); mu.Unlock() }})
		copilotNoSecret(t, out)
		return out
	}
	first := run(engine.Turn{Prompt: "First turn FAKE_ECHO"})
	if first.err != nil {
		t.Fatalf("first turn: %v", first.err)
	}
	if first.res.Sandbox != "docker" || !strings.HasPrefix(first.res.Text, "ECHO nmsg=2 ") || first.res.Usage != perCall {
		t.Errorf("first turn %+v", first.res)
	}
	second := run(engine.Turn{Prompt: "Second turn FAKE_ECHO", Resume: first.res.Conversation})
	if second.err != nil {
		t.Fatalf("resumed turn: %v", second.err)
	}
	if second.res.Session != first.res.Session || !strings.HasPrefix(second.res.Text, "ECHO nmsg=4 ") || second.res.Usage != perCall {
		t.Errorf("resumed turn %+v", second.res)
	}
}
