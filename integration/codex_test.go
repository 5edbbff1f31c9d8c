package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
)

// codexKey is the API key the tests give Codex. The fake's 401 body quotes
// it back ("Incorrect API key provided: sk-fake"), so it proves that a key
// echoed by the model API is redacted from every event and error.
const codexKey = "sk-fake"

// codexModel is in Codex's bundled catalog: no metadata warning, full tools.
const codexModel = "gpt-5.5"

// fastFailures bounds Codex's retries so every failure class takes one
// request and about a second.
var fastFailures = map[string]string{
	codex.OptionRequestMaxRetries: "0",
	codex.OptionStreamMaxRetries:  "0",
	codex.OptionStreamIdleTimeout: "1000",
}

// codexEnv is the real Codex CLI, run by outpost against the fake OpenAI
// API on the local provider or, with newDockerCodexEnv, in containers.
type codexEnv struct {
	t       *testing.T
	bin     string // the pinned codex (npm shim)
	fake    *openai.Server
	base    string // the local provider's lease directory ("" on docker)
	marker  string // in every prompt: finds the turns' processes in /proc
	prov    driver.Provider
	store   *conversation.FS
	workdir string
	environ []string
}

func newCodexEnv(t *testing.T, cfg openai.Config) *codexEnv {
	t.Helper()
	e := &codexEnv{t: t, bin: testenv.RequireCLI(t, "codex"), store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	e.marker = fmt.Sprintf("outpost-codex-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	e.fake = openai.Start(t, cfg)
	e.environ = []string{"OPENAI_BASE_URL=" + e.fake.URL(), "OPENAI_API_KEY=" + codexKey, "HOME=" + os.Getenv("HOME")}
	e.fresh()
	return e
}

// newDockerCodexEnv runs the turns in containers of outpost/debian:test,
// one per turn, on the host's network (the fake listens on the host's
// loopback, which the bridge network cannot reach). The pinned codex is
// installed into each container by the bootstrap step (its native,
// statically linked binary: no Node.js, no glibc needed).
func newDockerCodexEnv(t *testing.T, cfg openai.Config) *codexEnv {
	t.Helper()
	testenv.RequireCLI(t, "codex")
	dockertest.Require(t, debianTestImage)
	e := &codexEnv{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	e.marker = fmt.Sprintf("outpost-codex-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	e.fake = openai.Start(t, cfg)
	e.environ = []string{"OPENAI_BASE_URL=" + e.fake.URL(), "OPENAI_API_KEY=" + codexKey}
	e.prov = dockertest.Provider(t, debianTestImage, func(o *docker.Options) {
		o.Network = "host"
		o.Binary = outpostBinary(t)
	})
	t.Cleanup(func() { checkNoProcess(t, e.marker) })
	return e
}

// debianTestImage is scripts/build-images.sh's Debian image.
const debianTestImage = "outpost/debian:test"

// fresh makes the next turns run in a new sandbox that shares nothing
// with the previous ones but the store: a new lease directory on the
// local provider (docker makes a new container for every turn anyway).
func (e *codexEnv) fresh() {
	if e.bin == "" {
		return // docker
	}
	e.base = e.t.TempDir()
	path := filepath.Dir(e.bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	e.prov = local.New(&local.Options{BaseDir: e.base, Environ: []string{"PATH=" + path, "LANG=C.UTF-8"}})
	base := e.base
	e.t.Cleanup(func() { checkNoCodexLeft(e.t, base) })
}

// turn is one outpost turn of the codex preset and what it produced.
type turn struct {
	res    *engine.Result
	err    error
	events []harness.Event
}

func (tr turn) of(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, e := range tr.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// run runs a turn. on, when set, sees every event as it arrives.
func (e *codexEnv) run(ctx context.Context, t engine.Turn, o *engine.RunOptions, on func(harness.Event)) turn {
	e.t.Helper()
	if t.Agent.Harness == nil {
		t.Agent = harness.Agent{Kind: "cli", Harness: codex.Harness(), Model: codexModel}
	}
	if t.Workdir == "" {
		t.Workdir = e.workdir
	}
	t.Prompt += " [" + e.marker + "]"
	if o == nil {
		o = &engine.RunOptions{}
	}
	o.Provider, o.Store, o.Environ = e.prov, e.store, e.environ
	if o.Logger == nil {
		o.Logger = testenv.FailureLog(e.t, codexKey)
	}
	if o.Grace == 0 {
		o.Grace = 2 * time.Second
	}
	var mu sync.Mutex
	var out turn
	o.OnEvent = func(ev harness.Event) {
		mu.Lock()
		out.events = append(out.events, ev)
		mu.Unlock()
		if on != nil {
			on(ev)
		}
	}
	var stderr bytes.Buffer
	o.Stderr = &codexStderr{w: &stderr}
	out.res, out.err = engine.Run(ctx, t, o)
	mu.Lock()
	defer mu.Unlock()
	checkNoSecret(e.t, out, stderr.String())
	if e.t.Failed() {
		e.t.Logf("codex stderr:\n%s", stderr.String())
	}
	return out
}

type codexStderr struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *codexStderr) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// checkNoSecret fails when the API key appears in anything outpost gave
// the caller.
func checkNoSecret(t *testing.T, tr turn, stderr string) {
	t.Helper()
	b, _ := json.Marshal(struct {
		Events []harness.Event
		Result *engine.Result
	}{tr.events, tr.res})
	if bytes.Contains(b, []byte(codexKey)) {
		t.Errorf("the API key appears in the events or result: %s", b)
	}
	if tr.err != nil && strings.Contains(tr.err.Error(), codexKey) {
		t.Errorf("the API key appears in the error: %v", tr.err)
	}
	var oe *outpost.Error
	if errors.As(tr.err, &oe) {
		if d, _ := json.Marshal(oe.Details); bytes.Contains(d, []byte(codexKey)) {
			t.Errorf("the API key appears in the error details: %s", d)
		}
	}
	if strings.Contains(stderr, codexKey) {
		t.Errorf("the API key appears on the agent's redacted stderr")
	}
}

// checkNoProcess fails when a process whose command line holds marker
// (an exec turn's prompt) is still running, zombies aside.
func checkNoProcess(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processes(func(env, cmdline []byte) bool { return bytes.Contains(cmdline, []byte(marker)) })
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the turn still running after it: %s", strings.Join(left, "; "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNoCodexLeft fails when a process of the leases under base is still
// running (zombies, which are not running, aside): the node shim, the
// native codex binary, its sandbox helper and the commands it ran all have
// CODEX_HOME, HOME or their working files under the lease directory.
func checkNoCodexLeft(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := codexProcesses(base)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the sandbox still running after the turn: %s", strings.Join(left, "; "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func codexProcesses(base string) []string {
	return processes(func(env, cmdline []byte) bool {
		return bytes.Contains(env, []byte(base)) || bytes.Contains(cmdline, []byte(base))
	})
}

// processes lists the running processes (zombies aside) match selects by
// their environment and command line.
func processes(match func(env, cmdline []byte) bool) []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		stat, err := os.ReadFile(p + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // a zombie: dead, waiting for its parent
		}
		env, _ := os.ReadFile(p + "/environ")
		cmdline, _ := os.ReadFile(p + "/cmdline")
		if match(env, cmdline) {
			left = append(left, fmt.Sprintf("%s %q", filepath.Base(p), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return left
}

func TestCodexText(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	tr := e.run(context.Background(), engine.Turn{Prompt: "Say hello"}, nil, nil)
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	if tr.res.Text != openai.DefaultText || len(tr.of(harness.EventSession)) != 1 || len(tr.of(harness.EventFinished)) != 1 {
		t.Errorf("result %+v events %+v", tr.res, tr.events)
	}
	want := harness.Usage{InputTokens: 80, CacheReadTokens: 20, OutputTokens: 10, Complete: true}
	if tr.res.Usage != want || tr.res.ThreadUsage == nil || *tr.res.ThreadUsage != want {
		t.Errorf("usage %+v thread %+v, want %+v", tr.res.Usage, tr.res.ThreadUsage, want)
	}
	reqs, all := answered(t, e.fake.Requests())
	if len(reqs) != 1 || reqs[0].BearerToken() != codexKey || reqs[0].Model != codexModel {
		t.Fatalf("requests answered %+v; all:\n%s", reqs, all)
	}
	m, files, err := e.store.Get(context.Background(), tr.res.Conversation)
	if err != nil || m.Native != tr.res.Session || len(files) != 1 || !strings.HasPrefix(files[0].Path, codex.SessionsRoot+"/") {
		t.Errorf("stored %+v %v: %v", m, files, err)
	}
}

// TestCodexDotEnv: OPENAI_BASE_URL and OPENAI_API_KEY from the working
// directory's .outpost/.env point Codex at the endpoint, as the process
// environment does; the key is redacted all the same.
func TestCodexDotEnv(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	dir := filepath.Join(e.workdir, ".outpost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	env := "OPENAI_BASE_URL=" + e.fake.URL() + "\nOPENAI_API_KEY=" + codexKey + "\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	e.environ = []string{"HOME=" + os.Getenv("HOME")}
	tr := e.run(context.Background(), engine.Turn{Prompt: "Say hello"}, nil, nil)
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	if reqs, all := answered(t, e.fake.Requests()); len(reqs) != 1 || reqs[0].BearerToken() != codexKey || tr.res.Text != openai.DefaultText {
		t.Errorf("%d requests answered, text %q; all:\n%s", len(reqs), tr.res.Text, all)
	}
}

// answered is the model requests whose replies Codex did not abandon,
// and a listing of all of them for a failure message. A CLI asks again
// when a streamed reply is cut on its side (docs/metering.md); the fake
// records which end each reply had (fakeapi.EndOf), so a retry is
// tolerated only where the fake saw the client go.
func answered(t *testing.T, reqs []openai.Request) ([]openai.Request, string) {
	t.Helper()
	var kept []openai.Request
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "#%d %s %s %s input %d: %s\n", r.Seq, r.Time.Format("15:04:05.000"), r.Method, r.Path, r.NumInput, r.Ended)
		if r.Ended != fakeapi.EndClientGone {
			kept = append(kept, r)
		}
	}
	if len(kept) < len(reqs) {
		// The gateway's records say which layer cut the reply.
		t.Logf("Codex abandoned %d of %d replies:\n%s", len(reqs)-len(kept), len(reqs), b.String())
		testenv.ShowLog(t, "an abandoned reply")
	}
	return kept, b.String()
}

// TestCodexUsageIsWhatTheFakeReported: the turn's usage is exactly what
// the model API reported, also for a resumed turn, whose turn.completed
// holds the thread's running total.
func TestCodexUsageIsWhatTheFakeReported(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	e.fake.Enqueue(openai.Text("one").WithUsage(openai.Usage{InputTokens: 123, CachedTokens: 23, OutputTokens: 45, ReasoningTokens: 6}))
	first := e.run(context.Background(), engine.Turn{Prompt: "first"}, nil, nil)
	if first.err != nil {
		t.Fatal(first.err)
	}
	u1 := harness.Usage{InputTokens: 100, CacheReadTokens: 23, OutputTokens: 45, Complete: true}
	if first.res.Usage != u1 {
		t.Errorf("first turn usage %+v, want %+v", first.res.Usage, u1)
	}
	if fin := first.of(harness.EventFinished); len(fin) != 1 || fin[0].Usage == nil || *fin[0].Usage != u1 {
		t.Errorf("finished event %+v", fin)
	}
	e.fake.Enqueue(openai.Text("two").WithUsage(openai.Usage{InputTokens: 1000, CachedTokens: 900, OutputTokens: 7}))
	second := e.run(context.Background(), engine.Turn{Prompt: "second", Resume: first.res.Conversation}, nil, nil)
	if second.err != nil {
		t.Fatal(second.err)
	}
	u2 := harness.Usage{InputTokens: 100, CacheReadTokens: 900, OutputTokens: 7, Complete: true}
	if second.res.Usage != u2 || second.res.ThreadUsage == nil || *second.res.ThreadUsage != u1.Add(u2) {
		t.Errorf("second turn usage %+v thread %+v, want %+v and %+v", second.res.Usage, second.res.ThreadUsage, u2, u1.Add(u2))
	}
	m, err := e.store.Meta(context.Background(), first.res.Conversation)
	if err != nil || m.Usage != u1.Add(u2) || m.Turns != 2 {
		t.Errorf("stored meta %+v: %v", m, err)
	}
}

func TestCodexCommand(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	tr := e.run(context.Background(), engine.Turn{Prompt: "Run a command FAKE_TOOL", Options: map[string]string{codex.OptionSandbox: "workspace-write"}}, nil, nil)
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	calls, results := tr.of(harness.EventToolCall), tr.of(harness.EventToolResult)
	if len(calls) != 1 || len(results) != 1 || calls[0].Tool.Name != "command_execution" || calls[0].Tool.ID != results[0].Tool.ID {
		t.Fatalf("calls %+v results %+v", calls, results)
	}
	if !strings.Contains(string(calls[0].Tool.Input), "echo hi; echo bye") {
		t.Errorf("input %s", calls[0].Tool.Input)
	}
	// stdout and stderr share a terminal: their order is not fixed.
	if out := results[0].Tool.Output; !strings.Contains(out, "hi\n") || !strings.Contains(out, "bye\n") || results[0].Tool.Error {
		t.Errorf("result %+v", results[0].Tool)
	}
	if reqs, all := answered(t, e.fake.Requests()); !strings.HasPrefix(tr.res.Text, "Tool output was:") || len(reqs) != 2 {
		t.Errorf("text %q, %d requests answered; all:\n%s", tr.res.Text, len(reqs), all)
	}
}

// TestCodexResumeOnFreshSandbox: the second turn runs in a new sandbox
// with nothing but what the store restored, and Codex sees the history.
func TestCodexResumeOnFreshSandbox(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	first := e.run(context.Background(), engine.Turn{Prompt: "First turn FAKE_ECHO"}, nil, nil)
	if first.err != nil {
		t.Fatal(first.err)
	}
	e.fresh()
	second := e.run(context.Background(), engine.Turn{Prompt: "Second turn FAKE_ECHO", Resume: first.res.Conversation}, nil, nil)
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.res.Session != first.res.Session || second.res.Conversation != first.res.Conversation {
		t.Errorf("session %s/%s conversation %s/%s", first.res.Session, second.res.Session, first.res.Conversation, second.res.Conversation)
	}
	reqs := e.fake.Requests()
	if len(reqs) != 2 || reqs[1].NumInput <= reqs[0].NumInput || !containsText(reqs[1].UserTexts, "First turn FAKE_ECHO") {
		t.Errorf("second request has %d items (first %d), user texts %q", reqs[1].NumInput, reqs[0].NumInput, reqs[1].UserTexts)
	}
	if !strings.HasPrefix(second.res.Text, "ECHO nmsg=") {
		t.Errorf("text %q", second.res.Text)
	}
}

// countText is how many of texts contain s.
func countText(texts []string, s string) int {
	n := 0
	for _, x := range texts {
		if strings.Contains(x, s) {
			n++
		}
	}
	return n
}

func containsText(texts []string, s string) bool {
	for _, x := range texts {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// TestCodexForkThenResumeFork: a fork's rollout only references its
// parent; outpost captures the ancestor chain, so the fork resumes on a
// fresh sandbox.
func TestCodexForkThenResumeFork(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	parent := e.run(context.Background(), engine.Turn{Prompt: "Parent turn FAKE_ECHO"}, nil, nil)
	if parent.err != nil {
		t.Fatal(parent.err)
	}
	e.fresh()
	fork := e.run(context.Background(), engine.Turn{Prompt: "Forked turn FAKE_ECHO", Fork: parent.res.Conversation}, nil, nil)
	if fork.err != nil {
		t.Fatal(fork.err)
	}
	if fork.res.Session == parent.res.Session || fork.res.Parent != parent.res.Conversation || fork.res.Conversation == parent.res.Conversation {
		t.Fatalf("fork %+v of %+v", fork.res, parent.res)
	}
	one := harness.Usage{InputTokens: 80, CacheReadTokens: 20, OutputTokens: 10, Complete: true}
	if fork.res.Usage != one || fork.res.ThreadUsage == nil || *fork.res.ThreadUsage != one.Add(one) {
		t.Errorf("fork usage %+v thread %+v: the turn is charged with its own request only", fork.res.Usage, fork.res.ThreadUsage)
	}
	_, files, err := e.store.Get(context.Background(), fork.res.Conversation)
	if err != nil || len(files) != 2 {
		t.Fatalf("the fork's stored files %v: %v (want its rollout and its parent's)", files, err)
	}
	e.fresh()
	again := e.run(context.Background(), engine.Turn{Prompt: "Fork resumed FAKE_ECHO", Resume: fork.res.Conversation}, nil, nil)
	if again.err != nil {
		t.Fatalf("resuming the fork on a fresh sandbox: %v", again.err)
	}
	if again.res.Session != fork.res.Session {
		t.Errorf("resumed session %s, want %s", again.res.Session, fork.res.Session)
	}
	reqs := e.fake.Requests()
	last := reqs[len(reqs)-1]
	if !containsText(last.UserTexts, "Parent turn FAKE_ECHO") || !containsText(last.UserTexts, "Forked turn FAKE_ECHO") {
		t.Errorf("the resumed fork lost history: %q", last.UserTexts)
	}
	if again.res.Usage != one || again.res.ThreadUsage == nil || *again.res.ThreadUsage != one.Add(one).Add(one) {
		t.Errorf("resumed fork usage %+v thread %+v", again.res.Usage, again.res.ThreadUsage)
	}
}

// TestCodexSteerDuringStream: a message sent while the model streams goes
// in through app-server turn/steer; Codex abandons the stream and asks
// again with the message.
func TestCodexSteerDuringStream(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	e.fake.Enqueue(openai.Slow(40, 100*time.Millisecond))
	steer := make(chan string, 1)
	var once sync.Once
	tr := e.run(context.Background(), engine.Turn{Prompt: "Count slowly"}, &engine.RunOptions{Steer: steer}, func(ev harness.Event) {
		if ev.Type == harness.EventMessage && ev.Delta {
			once.Do(func() { steer <- "Stop counting and say hello" })
		}
	})
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	// Codex aborts the streaming request and samples again with the message
	// appended. On a loaded machine it can sample once more, before the
	// message joins the history or after (seen in full runs: [prompt],
	// [prompt], [prompt+message] and [prompt], [prompt+message],
	// [prompt+message]), so what is asserted is that the first request is
	// the prompt alone, the last carries both texts, and no request
	// carries the message twice.
	reqs := e.fake.Requests()
	last := reqs[len(reqs)-1]
	ok := len(reqs) >= 2 && last.LastUserText == "Stop counting and say hello" && containsText(last.UserTexts, "Count slowly") &&
		!containsText(reqs[0].UserTexts, "Stop counting")
	for _, r := range reqs {
		ok = ok && containsText(r.UserTexts, "Count slowly") && countText(r.UserTexts, "Stop counting and say hello") <= 1
	}
	if !ok {
		for _, r := range reqs {
			t.Logf("request %d %s %s: user texts %q", r.Seq, r.Method, r.Path, r.UserTexts)
		}
		t.Fatalf("requests: %d, last user text %q", len(reqs), last.LastUserText)
	}
	if len(reqs) > 2 {
		t.Logf("Codex sampled %d times before the message reached the model", len(reqs)-1)
	}
	if tr.res.Steered != 1 || tr.res.Text != openai.DefaultText {
		t.Errorf("steered %d text %q", tr.res.Steered, tr.res.Text)
	}
	var mode any
	for _, n := range tr.of(harness.EventNotice) {
		if n.Kind == "steer" {
			mode = n.Details["mode"]
		}
	}
	if mode != string(harness.SteerInjected) {
		t.Errorf("steer mode %v", mode)
	}
	// The app-server's thread resumes with exec like any other.
	e.fresh()
	next := e.run(context.Background(), engine.Turn{Prompt: "And now? FAKE_ECHO", Resume: tr.res.Conversation}, nil, nil)
	if next.err != nil || next.res.Session != tr.res.Session {
		t.Fatalf("resume after a live turn: %v %+v", next.err, next.res)
	}
}

// TestCodexSteerDuringTool: a message sent while a command runs is
// delivered with the command's result.
func TestCodexSteerDuringTool(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{Command: "sleep 1.5; echo slept"})
	steer := make(chan string, 1)
	var once sync.Once
	tr := e.run(context.Background(), engine.Turn{Prompt: "Run it FAKE_TOOL"}, &engine.RunOptions{Steer: steer}, func(ev harness.Event) {
		if ev.Type == harness.EventToolCall {
			once.Do(func() { steer <- "Also mention the weather" })
		}
	})
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	reqs := e.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	body := string(reqs[1].RawBody)
	if !strings.Contains(body, "function_call_output") || !strings.Contains(body, "slept") || reqs[1].LastUserText != "Also mention the weather" {
		t.Errorf("the follow-up request lacks the command's result or the message: last user %q", reqs[1].LastUserText)
	}
	if len(tr.of(harness.EventToolResult)) != 1 || tr.res.Steered != 1 {
		t.Errorf("results %+v steered %d", tr.of(harness.EventToolResult), tr.res.Steered)
	}
}

// TestCodexInterrupt: cancelling a live turn sends turn/interrupt; Codex
// ends the turn and records it, the turn is cancelled, nothing is left
// running, and the conversation resumes with Codex's note of the
// interruption.
func TestCodexInterrupt(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	e.fake.Enqueue(openai.Slow(60, 100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steer := make(chan string)
	tr := e.run(ctx, engine.Turn{Prompt: "Count slowly"}, &engine.RunOptions{Steer: steer}, func(ev harness.Event) {
		if ev.Type == harness.EventMessage && ev.Delta {
			cancel()
		}
	})
	if outpost.CodeOf(tr.err) != outpost.Cancelled {
		t.Fatalf("error %v, want code cancelled", tr.err)
	}
	checkNoCodexLeft(t, e.base)
	if tr.res == nil || tr.res.Conversation == "" {
		t.Fatalf("the interrupted turn was not captured: %+v", tr.res)
	}
	// turn/interrupt, not a signal, ended it: Codex recorded the abort.
	_, files, err := e.store.Get(context.Background(), tr.res.Conversation)
	if err != nil || len(files) != 1 || !bytes.Contains(files[0].Data, []byte(`"turn_aborted"`)) {
		t.Errorf("the rollout does not record the interruption (%v)", err)
	}
	e.fresh()
	next := e.run(context.Background(), engine.Turn{Prompt: "After the interrupt FAKE_ECHO", Resume: tr.res.Conversation}, nil, nil)
	if next.err != nil {
		t.Fatal(next.err)
	}
	reqs := e.fake.Requests()
	if last := reqs[len(reqs)-1]; !containsText(last.UserTexts, "turn_aborted") {
		t.Errorf("the resumed turn does not know of the interruption: %q", last.UserTexts)
	}
}

// TestCodexCancelExec: cancelling an exec turn stops the whole process
// group with SIGTERM: the node shim, the native binary and the command it
// runs.
func TestCodexCancelExec(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{Command: "sleep 60"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sleeping bool
	tr := e.run(ctx, engine.Turn{Prompt: "Run it FAKE_TOOL"}, nil, func(ev harness.Event) {
		if ev.Type != harness.EventToolCall {
			return
		}
		// Cancel once the command runs (in Codex's sandbox, in a session
		// of its own, outside outpost's process group).
		go func() {
			defer cancel()
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				var native, command bool
				for _, p := range codexProcesses(e.base) {
					native = native || strings.Contains(p, "x86_64-unknown-linux-musl/bin/codex exec")
					command = command || strings.Contains(p, `"sleep 60`)
				}
				if native && command {
					sleeping = true
					return
				}
			}
		}()
	})
	if outpost.CodeOf(tr.err) != outpost.Cancelled {
		t.Fatalf("error %v, want code cancelled", tr.err)
	}
	if !sleeping {
		t.Fatal("the native codex and its command were never seen running")
	}
	checkNoCodexLeft(t, e.base)
}

func TestCodexFailures(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{})
	for _, c := range []struct {
		marker      string
		code        outpost.Code
		unavailable bool
		quota       string
	}{
		{"FAKE_USAGE_LIMIT", outpost.Quota, false, codex.QuotaUsageLimit},
		{"FAKE_QUOTA", outpost.Quota, false, codex.QuotaInsufficientQuota},
		{"FAKE_429", outpost.Quota, false, codex.QuotaRateLimit},
		{"FAKE_500", outpost.Process, true, ""},
		{"FAKE_503", outpost.Process, true, ""},
		{"FAKE_401", outpost.Configuration, false, ""},
		{"FAKE_DROP", outpost.Process, true, ""},
		{"FAKE_TRUNCATE", outpost.Process, true, ""},
		{"FAKE_FAILED_CONTEXT", outpost.Process, false, ""},
		{"FAKE_FAILED", outpost.Process, true, ""},
		{"FAKE_DISCONNECT", outpost.Process, true, ""},
		{"FAKE_STALL", outpost.Process, true, ""},
	} {
		t.Run(c.marker, func(t *testing.T) {
			t.Parallel()
			tr := e.run(context.Background(), engine.Turn{Prompt: "x " + c.marker, Options: fastFailures}, nil, nil)
			var oe *outpost.Error
			if !errors.As(tr.err, &oe) || oe.Code != c.code {
				t.Fatalf("error %v, want code %s", tr.err, c.code)
			}
			if got, _ := oe.Details["unavailable"].(bool); got != c.unavailable {
				t.Errorf("details %v: unavailable %v, want %v", oe.Details, got, c.unavailable)
			}
			if c.quota != "" && oe.Details["quota"] != c.quota {
				t.Errorf("details %v: quota %v, want %s", oe.Details, oe.Details["quota"], c.quota)
			}
			if len(tr.of(harness.EventFailure)) != 1 {
				t.Errorf("failures %+v", tr.of(harness.EventFailure))
			}
		})
	}
}

// TestCodexWatchdog: a server that never answers and a refused connection
// never end a Codex turn by themselves; outpost's inactivity watchdog and
// timeout do, and nothing is left running.
func TestCodexWatchdog(t *testing.T) {
	t.Parallel()
	t.Run("hang", func(t *testing.T) {
		t.Parallel()
		e := newCodexEnv(t, openai.Config{})
		tr := e.run(context.Background(), engine.Turn{Prompt: "x FAKE_HANG", Inactivity: 2 * time.Second, Options: fastFailures}, nil, nil)
		var oe *outpost.Error
		if !errors.As(tr.err, &oe) || oe.Code != outpost.Process || oe.Details["inactivity"] != true || oe.Details["stalled"] != true {
			t.Fatalf("error %v, want process with details.inactivity and details.stalled", tr.err)
		}
		checkNoCodexLeft(t, e.base)
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		e := newCodexEnv(t, openai.Config{})
		refused, err := openai.RefusedURL()
		if err != nil {
			t.Fatal(err)
		}
		e.environ[0] = "OPENAI_BASE_URL=" + refused
		// The measured case, Codex connecting to the model API itself
		// (secrets mode env): it prints "Reconnecting... waiting for
		// network" forever. Its retry notices are no activity (no
		// inactivity watchdog here), and a turn of only retries is an
		// outage once the retry bound passes.
		tr := e.run(context.Background(), engine.Turn{Prompt: "hello", Inactivity: -1, RetryBound: 2 * time.Second, Timeout: 2 * time.Minute, Options: fastFailures},
			&engine.RunOptions{Secrets: engine.SecretsEnv}, nil)
		var oe *outpost.Error
		if !errors.As(tr.err, &oe) || oe.Code != outpost.Process || oe.Details["retrying"] != true || !outpost.UnavailableFault(tr.err) {
			t.Fatalf("error %v, want process with details.retrying and details.unavailable", tr.err)
		}
		var waiting bool
		for _, n := range tr.of(harness.EventNotice) {
			waiting = waiting || n.Details["waiting_for_network"] == true
		}
		if !waiting {
			t.Errorf("no waiting-for-network notice in %+v", tr.events)
		}
		checkNoCodexLeft(t, e.base)
	})
	t.Run("refused through the gateway", func(t *testing.T) {
		t.Parallel()
		e := newCodexEnv(t, openai.Config{})
		refused, err := openai.RefusedURL()
		if err != nil {
			t.Fatal(err)
		}
		e.environ[0] = "OPENAI_BASE_URL=" + refused
		// Codex reaches the gateway, which drops the connection when the
		// upstream refuses it: Codex retries its stream, then gives up
		// ("stream disconnected before completion"), an outage.
		tr := e.run(context.Background(), engine.Turn{Prompt: "hello", Inactivity: -1, RetryBound: 2 * time.Second, Timeout: 2 * time.Minute, Options: fastFailures}, nil, nil)
		if outpost.CodeOf(tr.err) != outpost.Process || !outpost.UnavailableFault(tr.err) || tr.res == nil || tr.res.Secrets != engine.SecretsGateway {
			t.Fatalf("error %v, want process with details.unavailable through the gateway", tr.err)
		}
		checkNoCodexLeft(t, e.base)
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		e := newCodexEnv(t, openai.Config{})
		tr := e.run(context.Background(), engine.Turn{Prompt: "x FAKE_HANG", Timeout: 3 * time.Second, Inactivity: -1}, nil, nil)
		if outpost.CodeOf(tr.err) != outpost.Timeout {
			t.Fatalf("error %v, want timeout", tr.err)
		}
		checkNoCodexLeft(t, e.base)
	})
}

// TestCodexBudget: a model that calls a tool forever is stopped by the
// max-model-requests budget.
func TestCodexBudget(t *testing.T) {
	t.Parallel()
	e := newCodexEnv(t, openai.Config{Choose: func(*openai.Request) openai.Scenario { return openai.ToolCall("echo again") }})
	tr := e.run(context.Background(), engine.Turn{Prompt: "Loop", Options: map[string]string{codex.OptionMaxModelRequests: "2"}}, nil, nil)
	var oe *outpost.Error
	if !errors.As(tr.err, &oe) || oe.Code != outpost.Process || oe.Details["limit"] != codex.OptionMaxModelRequests {
		t.Fatalf("error %v, want process with details.limit", tr.err)
	}
	if n := len(e.fake.Requests()); n < 2 || n > 3 {
		t.Errorf("%d model requests for a budget of 2 (the third may have been sent, never answered)", n)
	}
	checkNoCodexLeft(t, e.base)
}

// TestCodexDocker runs the real Codex in containers: a text turn, a
// command, resume and fork (each turn in a fresh container), steering
// through the app-server, failure classes and the watchdog.
func TestCodexDocker(t *testing.T) {
	t.Parallel()
	e := newDockerCodexEnv(t, openai.Config{})
	ctx := context.Background()
	one := harness.Usage{InputTokens: 80, CacheReadTokens: 20, OutputTokens: 10, Complete: true}

	var first turn
	t.Run("text", func(t *testing.T) {
		first = e.run(ctx, engine.Turn{Prompt: "First turn FAKE_ECHO"}, nil, nil)
		if first.err != nil {
			t.Fatal(first.err)
		}
		if first.res.Sandbox != "docker" || !strings.HasPrefix(first.res.Text, "ECHO nmsg=") || first.res.Usage != one {
			t.Errorf("result %+v", first.res)
		}
	})
	if first.err != nil || first.res == nil {
		t.FailNow()
	}
	// The turns that need no fresh container share one held lease: the
	// bootstrap copies the CLI into a container once.
	lease, err := sandbox.Acquire(ctx, e.prov, driver.Options{Workdir: e.workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(context.Background())
	held := func(o *engine.RunOptions) *engine.RunOptions {
		if o == nil {
			o = &engine.RunOptions{}
		}
		o.Lease = lease
		return o
	}
	t.Run("command", func(t *testing.T) {
		// The container is the sandbox: Codex's bubblewrap needs user
		// namespaces that a hardened container does not give.
		tr := e.run(ctx, engine.Turn{Prompt: "Run a command FAKE_TOOL", Options: map[string]string{codex.OptionSandbox: "danger-full-access"}}, held(nil), nil)
		if tr.err != nil {
			t.Fatal(tr.err)
		}
		if r := tr.of(harness.EventToolResult); len(r) != 1 || !strings.Contains(r[0].Tool.Output, "hi") || r[0].Tool.Error {
			t.Errorf("tool results %+v", r)
		}
	})
	t.Run("resume in a fresh container", func(t *testing.T) {
		tr := e.run(ctx, engine.Turn{Prompt: "Second turn FAKE_ECHO", Resume: first.res.Conversation}, nil, nil)
		if tr.err != nil {
			t.Fatal(tr.err)
		}
		reqs := e.fake.Requests()
		if tr.res.Session != first.res.Session || !containsText(reqs[len(reqs)-1].UserTexts, "First turn FAKE_ECHO") || tr.res.Usage != one {
			t.Errorf("result %+v, user texts %q", tr.res, reqs[len(reqs)-1].UserTexts)
		}
	})
	t.Run("fork, then resume the fork in fresh containers", func(t *testing.T) {
		fork := e.run(ctx, engine.Turn{Prompt: "Forked turn FAKE_ECHO", Fork: first.res.Conversation}, nil, nil)
		if fork.err != nil {
			t.Fatal(fork.err)
		}
		if fork.res.Session == first.res.Session || fork.res.Parent != first.res.Conversation {
			t.Fatalf("fork %+v", fork.res)
		}
		again := e.run(ctx, engine.Turn{Prompt: "Fork resumed FAKE_ECHO", Resume: fork.res.Conversation}, nil, nil)
		if again.err != nil {
			t.Fatal(again.err)
		}
		reqs := e.fake.Requests()
		if last := reqs[len(reqs)-1]; !containsText(last.UserTexts, "Forked turn FAKE_ECHO") || !containsText(last.UserTexts, "First turn FAKE_ECHO") {
			t.Errorf("the resumed fork lost history: %q", last.UserTexts)
		}
	})
	t.Run("steer during a stream", func(t *testing.T) {
		e.fake.Enqueue(openai.Slow(40, 100*time.Millisecond))
		steer := make(chan string, 1)
		var once sync.Once
		n := len(e.fake.Requests())
		tr := e.run(ctx, engine.Turn{Prompt: "Count slowly"}, held(&engine.RunOptions{Steer: steer}), func(ev harness.Event) {
			if ev.Type == harness.EventMessage && ev.Delta {
				once.Do(func() { steer <- "Stop counting and say hello" })
			}
		})
		if tr.err != nil {
			t.Fatal(tr.err)
		}
		reqs := e.fake.Requests()[n:]
		if len(reqs) != 2 || reqs[1].LastUserText != "Stop counting and say hello" || tr.res.Steered != 1 {
			t.Errorf("%d requests, steered %d", len(reqs), tr.res.Steered)
		}
	})
	t.Run("failures", func(t *testing.T) {
		for marker, want := range map[string]outpost.Code{"FAKE_USAGE_LIMIT": outpost.Quota, "FAKE_500": outpost.Process} {
			tr := e.run(ctx, engine.Turn{Prompt: "x " + marker, Options: fastFailures}, held(nil), nil)
			var oe *outpost.Error
			if !errors.As(tr.err, &oe) || oe.Code != want || (marker == "FAKE_500") != (oe.Details["unavailable"] == true) {
				t.Errorf("%s: %v", marker, tr.err)
			}
		}
	})
	t.Run("hang ended by the watchdog", func(t *testing.T) {
		tr := e.run(ctx, engine.Turn{Prompt: "x FAKE_HANG", Inactivity: 2 * time.Second, Options: fastFailures}, held(nil), nil)
		var oe *outpost.Error
		if !errors.As(tr.err, &oe) || oe.Details["inactivity"] != true {
			t.Fatalf("error %v", tr.err)
		}
		// The container lives on (a held lease); the turn's processes do not.
		checkNoProcess(t, e.marker)
	})
}

// TestCodexCommandLine: `outpost run --agent codex` against the fake, in
// process (cli.Run) and with the built binary, as docs/presets/codex.md
// shows it; then `--resume` of the stored conversation.
func TestCodexCommandLine(t *testing.T) {
	bin := testenv.RequireCLI(t, "codex")
	fake := openai.Start(t, openai.Config{})
	home, wd := t.TempDir(), t.TempDir()
	t.Setenv("OUTPOST_HOME", home)
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("OPENAI_BASE_URL", fake.URL())
	t.Setenv("OPENAI_API_KEY", codexKey)
	t.Setenv("TMPDIR", t.TempDir()) // the local provider's leases

	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), []string{"run", "--agent", "codex", "--model", codexModel, "--json", "--workdir", wd, "Say hello"}, strings.NewReader(""), &out, &errb)
	res := codexResult(t, out.String())
	if code != 0 || res.Agent != "codex" || res.Text != openai.DefaultText || res.Usage.InputTokens != 80 || res.ThreadUsage == nil || res.Conversation == "" {
		t.Fatalf("exit %d, result %+v, stderr %s", code, res, errb.String())
	}
	if strings.Contains(out.String()+errb.String(), codexKey) {
		t.Error("the API key reached the output")
	}

	// --resume takes the conversation's agent: no --agent needed.
	code, stdout, stderr := runOutpost(t, home, wd, "run", "--model", codexModel, "--json", "--resume", res.Conversation, "--option", "sandbox=workspace-write", "Again FAKE_ECHO")
	again := codexResult(t, stdout)
	if code != 0 || again.Conversation != res.Conversation || !strings.HasPrefix(again.Text, "ECHO nmsg=") || again.ThreadUsage.InputTokens != 160 {
		t.Fatalf("exit %d, result %+v, stderr %s", code, again, stderr)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("%d requests", n)
	}
}

func codexResult(t *testing.T, out string) cli.ResultLine {
	t.Helper()
	var r cli.ResultLine
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"type":"result"`) {
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}
