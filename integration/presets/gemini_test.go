package presets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/gemini"
	fakegemini "github.com/outposthq/outpost/internal/fakeapi/gemini"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// geminiKey is the API key the tests give Gemini CLI; it must never show
// in what outpost hands the caller.
const geminiKey = "gemini-test-key-8d2e61"

// geminiModel skips the CLI's model router (one model call per step).
const geminiModel = "gemini-2.5-flash"

// geminiCall is the usage of one model call of the fake's default reply
// (1200 prompt tokens, 1000 of them cached, 9 candidates, 21 thoughts).
var geminiCall = harness.Usage{InputTokens: 200, OutputTokens: 30, CacheReadTokens: 1000, Complete: true}

// geminiEnv is the real Gemini CLI run by outpost on the local provider
// against the fake Gemini API.
type geminiEnv struct {
	t       *testing.T
	fake    *fakegemini.Server
	prov    driver.Provider
	store   *conversation.FS
	path    string
	environ []string
}

func newGeminiEnv(t *testing.T, baseURL string) *geminiEnv {
	t.Helper()
	return newGeminiEnvConfig(t, baseURL, fakegemini.Config{})
}

// newGeminiEnvConfig is newGeminiEnv with the fake's configuration.
func newGeminiEnvConfig(t *testing.T, baseURL string, cfg fakegemini.Config) *geminiEnv {
	t.Helper()
	bin := filepath.Dir(testenv.RequireCLI(t, "gemini"))
	e := &geminiEnv{t: t, store: conversation.NewFS(t.TempDir())}
	e.fake = fakegemini.Start(t, cfg)
	if baseURL == "" {
		baseURL = e.fake.URL()
	}
	e.path = bin + string(os.PathListSeparator) + os.Getenv("PATH")
	e.environ = []string{"GEMINI_API_KEY=" + geminiKey, "GOOGLE_GEMINI_BASE_URL=" + baseURL}
	e.fresh()
	return e
}

// fresh makes the next turns run on a new provider sharing only the store.
func (e *geminiEnv) fresh() {
	e.prov = local.New(&local.Options{BaseDir: e.t.TempDir(), Environ: []string{"PATH=" + e.path, "LANG=C.UTF-8"}})
}

// firstTurn runs the tests' first turn, a shell call and text, on the
// local provider.
func (e *geminiEnv) firstTurn() geminiTurn {
	e.t.Helper()
	turn := engine.Turn{Prompt: "run it FAKE_TOOL", Agent: harness.Agent{Model: geminiModel}}
	first := e.run(turn)
	if outpost.UnavailableFault(first.err) {
		// Once, in a CI run of the whole suite (2 cores, every package at
		// once), this turn ended with the CLI's "[API Error:
		// terminated]": its connection to the credential gateway closed
		// after the reply began. 53 runs under load here never showed it,
		// and the cause is not found (docs/presets/gemini.md). The turn is
		// classified as it must be (an outage), which an orchestrator
		// retries; so does this test, once, saying so.
		e.t.Logf("OUTAGE ON THE LOOPBACK PATH, running the first turn once more: %v", first.err)
		e.fresh()
		e.fake.Reset()
		first = e.run(turn)
	}
	return first
}

type geminiTurn struct {
	res    *engine.Result
	err    error
	events []harness.Event
	stderr string
}

func (tr geminiTurn) of(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range tr.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *geminiEnv) run(turn engine.Turn) geminiTurn {
	e.t.Helper()
	tr := runGemini(e.t, turn, &engine.RunOptions{Provider: e.prov, Store: e.store, Environ: e.environ})
	if e.t.Failed() || tr.err != nil {
		e.logFake()
	}
	return tr
}

// logFake logs the fake's requests: when each came, what it was served
// and how its reply ended.
func (e *geminiEnv) logFake() {
	var b strings.Builder
	for _, r := range e.fake.Requests() {
		fmt.Fprintf(&b, "#%d %s %s %s contents %d: %s, %s\n", r.Seq, r.Time.Format("15:04:05.000"), r.Method, r.RPC, r.NumContents, r.Served, r.Ended)
	}
	e.t.Logf("the fake's requests:\n%s", b.String())
}

func runGemini(t *testing.T, turn engine.Turn, o *engine.RunOptions) geminiTurn {
	t.Helper()
	h := turn.Agent.Harness
	if h == nil {
		h = gemini.Harness()
	}
	turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: h, Model: turn.Agent.Model}
	if turn.Workdir == "" {
		turn.Workdir = t.TempDir()
	}
	if turn.Timeout == 0 {
		// The shared test machine runs at load 20 to 60: the CLI's
		// start-up alone took more than 3 min there.
		turn.Timeout = 10 * time.Minute
	}
	var out geminiTurn
	var mu sync.Mutex
	var stderr, steps lockedBuffer
	o.Stderr, o.Raw, o.Grace = &stderr, true, 2*time.Second
	o.OnEvent = func(ev harness.Event) { mu.Lock(); out.events = append(out.events, ev); mu.Unlock() }
	// The engine's steps, with their times: where a slow turn spent its
	// time (a failure logs them).
	o.Logger = slog.New(slog.NewTextHandler(&steps, &slog.HandlerOptions{Level: slog.LevelDebug}))
	out.res, out.err = engine.Run(context.Background(), turn, o)
	out.stderr = stderr.String()
	b, _ := json.Marshal(struct {
		E []harness.Event
		R *engine.Result
		S string
	}{out.events, out.res, out.stderr})
	if strings.Contains(string(b), geminiKey) || strings.Contains(steps.String(), geminiKey) || (out.err != nil && strings.Contains(out.err.Error(), geminiKey)) {
		t.Errorf("the API key appears in what outpost returned")
	}
	if t.Failed() || out.err != nil {
		mu.Lock()
		t.Logf("gemini stderr:\n%s\nevents: %s\nsteps:\n%s", out.stderr, eventSummary(out.events), steps.String())
		mu.Unlock()
	}
	return out
}

// TestGemini: a turn with a shell call and text on the local provider,
// its usage equal to the fake's counts; the conversation then resumes in a
// container and forks, with a tool call, on an ssh host, each in another
// working directory and installing the pinned CLI with the bootstrap step
// (the Debian test images have no gemini and node 18, too old: the
// container's image gets the host's node, the ssh host is
// sshtest.NodeImage). The container reaches the fake on the host's
// loopback (host network), the ssh host through a relay on the Docker
// bridge. (It was two tests, this and TestGeminiResumeAndFork, each with
// the same first turn; this one's resume and fork on fresh local
// sandboxes asserted what the container's and the ssh host's do.)
func TestGemini(t *testing.T) {
	t.Parallel()
	e := newGeminiEnv(t, "")
	dockertest.Require(t, dockertest.Debian)
	sshd := sshtest.SharedImage(t, sshtest.NodeImage)
	first := e.firstTurn()
	if first.err != nil {
		t.Fatalf("first turn: %v", first.err)
	}
	calls, results := first.of(harness.EventToolCall), first.of(harness.EventToolResult)
	if len(calls) != 1 || calls[0].Tool.Name != "run_shell_command" || len(results) != 1 || results[0].Tool.Output != "tool-ran" {
		t.Errorf("tool events %+v %+v", calls, results)
	}
	if !strings.HasPrefix(first.res.Text, "Tool output was:") || !strings.Contains(first.res.Text, "tool-ran") {
		t.Errorf("text %q", first.res.Text)
	}
	if n := len(e.fake.Turns()); n != 2 || first.res.Usage != times(geminiCall, 2) {
		t.Errorf("%d model calls, usage %+v, want 2 and %+v", n, first.res.Usage, times(geminiCall, 2))
	}
	if first.res.Session == "" || first.res.Conversation == "" {
		t.Fatalf("result %+v", first.res)
	}
	t.Run("ResumeOnDocker", func(t *testing.T) {
		dock := dockertest.Provider(t, nodeImage(t), func(o *docker.Options) { o.Network = "host" })
		tr := e.on(t, dock, e.environ, engine.Turn{Prompt: "again FAKE_ECHO", Resume: first.res.Conversation})
		if tr.err != nil {
			t.Fatalf("resumed turn: %v", tr.err)
		}
		// The history came along: the first turn's prompt and answer,
		// the call and its result, and the new prompt.
		if tr.res.Sandbox != "docker" || tr.res.Session != first.res.Session ||
			!strings.HasPrefix(tr.res.Text, "ECHO ncontents=5 ") || tr.res.Usage != geminiCall {
			t.Errorf("resumed turn %+v", tr.res)
		}
	})
	t.Run("ForkOnSSH", func(t *testing.T) {
		ssh := sshtest.Provider(t, sshd, sshtest.Patient)
		relay := "http://" + sshd.Relay(t, strings.TrimPrefix(e.fake.URL(), "http://"))
		environ := []string{"GEMINI_API_KEY=" + geminiKey, "GOOGLE_GEMINI_BASE_URL=" + relay}
		tr := e.on(t, ssh, environ, engine.Turn{Prompt: "fork FAKE_TOOL", Fork: first.res.Conversation})
		if tr.err != nil {
			t.Fatalf("forked turn: %v", tr.err)
		}
		if tr.res.Sandbox != "ssh" || tr.res.Session == first.res.Session || tr.res.Conversation == first.res.Conversation || tr.res.Parent != first.res.Conversation ||
			len(tr.of(harness.EventToolCall)) != 1 || !strings.Contains(tr.res.Text, "tool-ran") || tr.res.Usage != times(geminiCall, 2) {
			t.Errorf("forked turn %+v (parent session %s)", tr.res, first.res.Session)
		}
		if reqs := e.fake.Turns(); len(reqs) != 2 || reqs[0].NumContents < 5 {
			t.Errorf("the fork did not carry the parent's history: %+v", reqs)
		}
	})
}

// on runs turn on prov, the fake's record begun afresh. These turns
// install the pinned CLI first (the bootstrap step): on a CI machine with
// both cores busy that alone took minutes.
func (e *geminiEnv) on(t *testing.T, prov driver.Provider, environ []string, turn engine.Turn) geminiTurn {
	t.Helper()
	e.fake.Reset()
	turn.Agent.Model = geminiModel
	turn.Timeout = 10 * time.Minute
	tr := runGemini(t, turn, &engine.RunOptions{Provider: prov, Store: e.store, Environ: environ})
	if t.Failed() || tr.err != nil {
		e.logFake()
	}
	return tr
}

// TestGeminiFailures: a spent daily quota is quota; an overloaded model
// and an unreachable API are process with details.unavailable, once the
// CLI's three attempts (the configuration's general.maxAttempts) are over;
// so is a reply whose stream breaks off, which the CLI does not retry.
func TestGeminiFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prompt string
		unreachable  bool
		code         outpost.Code
		outage       bool
		calls        int // model calls; 0: not checked
	}{
		{"DailyQuotaIsQuota", "x FAKE_QUOTA", false, outpost.Quota, false, 1},
		{"OverloadedIsUnavailable", "x FAKE_503", false, outpost.Process, true, gemini.MaxAttempts},
		{"UnreachableIsUnavailable", "x", true, outpost.Process, true, 0},
		// The CLI does not retry a reply whose stream broke off.
		{"BrokenStreamIsUnavailable", "x FAKE_DROP", false, outpost.Process, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := ""
			if tc.unreachable {
				base = "http://127.0.0.1:1"
			}
			e := newGeminiEnv(t, base)
			tr := e.run(engine.Turn{Prompt: tc.prompt, Agent: harness.Agent{Model: geminiModel}, RetryBound: 2 * time.Minute})
			var oe *outpost.Error
			if !errors.As(tr.err, &oe) || oe.Code != tc.code {
				t.Fatalf("err %v, want code %s", tr.err, tc.code)
			}
			if got := outpost.UnavailableFault(tr.err); got != tc.outage {
				t.Errorf("unavailable = %v, want %v (%v)", got, tc.outage, oe.Details)
			}
			if _, retrying := oe.Details["retrying"]; retrying {
				t.Errorf("the turn was stopped by the retry bound, not ended by the CLI: %v", oe.Details)
			}
			if n := len(e.fake.Turns()); tc.calls > 0 && n != tc.calls {
				t.Errorf("%d model calls, want %d", n, tc.calls)
			}
		})
	}
}

// TestGeminiRepair: Gemini CLI has no schema flag, so the turn asks with
// an instruction; a prose answer is repaired by resuming the conversation.
func TestGeminiRepair(t *testing.T) {
	t.Parallel()
	e := newGeminiEnv(t, "")
	e.fake.Enqueue(fakegemini.Text("I would rather not."), fakegemini.Text("```json\n{\"name\": \"Barbara\", \"age\": 88}\n```"))
	tr := e.run(engine.Turn{Prompt: "name a pioneer", Output: json.RawMessage(personSchema), Agent: harness.Agent{Model: geminiModel}})
	if tr.err != nil {
		t.Fatalf("turn: %v", tr.err)
	}
	if string(tr.res.Output) != `{"name":"Barbara","age":88}` || len(tr.res.Attempts) != 2 {
		t.Fatalf("output %s, %d attempts", tr.res.Output, len(tr.res.Attempts))
	}
	reqs := e.fake.Turns()
	if len(reqs) != 2 || !strings.Contains(reqs[0].LastUserText, "JSON Schema") ||
		!strings.Contains(reqs[1].LastUserText, "does not match the required JSON Schema") || reqs[1].NumContents <= reqs[0].NumContents {
		t.Errorf("requests %+v", reqs)
	}
}

// TestGeminiBootstrapCommand: `outpost bootstrap gemini` installs the
// pinned package, its SHA-512 verified, into a fresh container and runs
// its --version.
func TestGeminiBootstrapCommand(t *testing.T) {
	t.Parallel()
	testenv.RequireCLI(t, "gemini") // the same pin; its download is the bootstrap's
	dockertest.Require(t, dockertest.Debian)
	image := nodeImage(t)
	code, out, errOut := runOutpost(t, t.TempDir(), t.TempDir(), "bootstrap", "gemini", "--sandbox", "docker", "--image", image, "--json")
	if code != 0 {
		t.Fatalf("outpost bootstrap: exit %d\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var line struct {
		Type, Check, Version string
		Error                any
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &line); err != nil || line.Type != "result" || line.Error != nil ||
		line.Version != testenv.CLIVersion("gemini") || !strings.Contains(line.Check, testenv.CLIVersion("gemini")) {
		t.Fatalf("result line %s (%v)", lines[len(lines)-1], err)
	}
}

// BenchmarkGeminiTurn is one "Say hello" turn of the pinned Gemini CLI
// (--model gemini-2.5-flash: no router call) against the fake Gemini API,
// direct and through outpost in alternating order (benchPairs,
// docs/benchmarks.md):
//
//	go test ./integration/presets -run '^$' -bench BenchmarkGeminiTurn -benchtime 8x -v
func BenchmarkGeminiTurn(b *testing.B) {
	fake := fakegemini.Start(b, fakegemini.Config{})
	benchCLI{h: gemini.Harness(), bin: testenv.RequireCLI(b, "gemini"), model: geminiModel, text: fakegemini.DefaultText,
		done: `"status":"success"`, // the text comes in deltas
		vars: map[string]string{"GEMINI_API_KEY": geminiKey, "GOOGLE_GEMINI_BASE_URL": fake.URL()}}.run(b)
}
