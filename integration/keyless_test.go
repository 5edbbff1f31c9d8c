package integration

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox/driver"
)

// keylessCLI is one real CLI against its fake, for the credential
// gateway's end-to-end tests on the local provider.
type keylessCLI struct {
	name    string
	h       *harness.Harness
	model   string
	options map[string]string
	path    func(t *testing.T) string // the directory holding the CLI
	// start starts the fake with probe as the command of its tool call and
	// returns the variables pointing the CLI at it with key.
	start func(t *testing.T, probe, key string) (environ []string, f keylessFake)
}

// keylessFake is what the tests read of a fake: the credential of each
// model request, and every request body.
type keylessFake interface {
	credentials() []string
	bodies() string
}

type anthropicFake struct{ *anthropic.Server }

func (f anthropicFake) credentials() []string {
	var out []string
	for _, r := range f.MessageRequests() {
		out = append(out, r.APIKey)
	}
	return out
}

func (f anthropicFake) bodies() string {
	var b strings.Builder
	for _, r := range f.Requests() {
		b.Write(r.Body)
	}
	return b.String()
}

type openaiFake struct{ *openai.Server }

func (f openaiFake) credentials() []string {
	var out []string
	for _, r := range f.Requests() {
		if r.Method == http.MethodPost {
			out = append(out, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		}
	}
	return out
}

func (f openaiFake) bodies() string {
	var b strings.Builder
	for _, r := range f.Requests() {
		b.Write(r.RawBody)
	}
	return b.String()
}

var keylessCLIs = []keylessCLI{
	{
		name: "claude", h: claude.Harness(), options: map[string]string{claude.OptionMaxRetries: "0", claude.OptionPermissionMode: "bypassPermissions"},
		path: func(t *testing.T) string { return dirOf(testenv.RequireCLI(t, "claude")) },
		start: func(t *testing.T, probe, key string) ([]string, keylessFake) {
			srv := anthropic.New(t, anthropic.Options{ToolCommand: probe})
			return []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=" + key}, anthropicFake{srv}
		},
	},
	{
		name: "codex", h: codex.Harness(), model: codexModel,
		options: map[string]string{codex.OptionSandbox: "danger-full-access", codex.OptionRequestMaxRetries: "0", codex.OptionStreamMaxRetries: "0"},
		path:    func(t *testing.T) string { return dirOf(testenv.RequireCLI(t, "codex")) },
		start: func(t *testing.T, probe, key string) ([]string, keylessFake) {
			srv := openai.Start(t, openai.Config{Command: probe})
			return []string{"OPENAI_BASE_URL=" + srv.URL(), "OPENAI_API_KEY=" + key}, openaiFake{srv}
		},
	},
	{
		name: "copilot", h: copilot.Harness(), options: map[string]string{copilot.OptionPermissions: "all"},
		path: func(t *testing.T) string { return copilotBinDir(t) },
		start: func(t *testing.T, probe, key string) ([]string, keylessFake) {
			srv := openai.Start(t, openai.Config{Command: probe, Choose: copilotChoice})
			return []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + srv.URL(), "COPILOT_PROVIDER_API_KEY=" + key,
				"COPILOT_MODEL=" + copilotModel, "COPILOT_PKG_CACHE_HOME=" + copilotPkgCache()}, openaiFake{srv}
		},
	},
}

func dirOf(bin string) string { return bin[:strings.LastIndex(bin, "/")] }

// keylessRun is one turn of a keyless test.
type keylessRun struct {
	res    *engine.Result
	err    error
	events []harness.Event
}

func (r keylessRun) notices(kind string) []harness.Event {
	var out []harness.Event
	for _, ev := range r.events {
		if ev.Type == harness.EventNotice && ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// runKeyless runs one turn of c on a local sandbox with environ.
func runKeyless(t *testing.T, c keylessCLI, environ []string, tn engine.Turn, mod func(*engine.RunOptions)) keylessRun {
	t.Helper()
	p := local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=" + c.path(t) + ":/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}})
	return runKeylessOn(t, p, c, environ, tn, mod)
}

// runKeylessOn runs one turn of c on p with environ.
func runKeylessOn(t *testing.T, p driver.Provider, c keylessCLI, environ []string, tn engine.Turn, mod func(*engine.RunOptions)) keylessRun {
	t.Helper()
	tn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: c.h, Model: c.model}
	tn.Options = c.options
	tn.Workdir = t.TempDir()
	if tn.Timeout == 0 {
		tn.Timeout = 2 * time.Minute
	}
	var mu sync.Mutex
	var out keylessRun
	o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(t.TempDir()), Grace: 2 * time.Second, Raw: true, Logger: testenv.FailureLog(t),
		Environ: append(environ, "HOME="+t.TempDir()),
		OnEvent: func(ev harness.Event) {
			mu.Lock()
			out.events = append(out.events, ev)
			mu.Unlock()
		}}
	if mod != nil {
		mod(o)
	}
	out.res, out.err = engine.Run(context.Background(), tn, o)
	return out
}

// TestKeylessRealCLIs: claude, codex and copilot on the local sandbox
// with secrets mode gateway (the default). The fake receives the real key
// on every request; a tool call in the turn looks for the key in the
// agent's environment, under its home and in every process's environment
// it can read, and finds none (while the token is there); the result
// says secrets gateway and egress gateway (open where local leases cannot
// run in namespaces). With --secrets env, the same
// turn gets the key itself (the check can see it), and says so.
func TestKeylessRealCLIs(t *testing.T) {
	t.Parallel()
	for _, c := range keylessCLIs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			key, probe := testenv.KeylessProbe(t)
			for _, mode := range []string{engine.SecretsGateway, engine.SecretsEnv} {
				t.Run(mode, func(t *testing.T) {
					environ, fake := c.start(t, probe, key)
					r := runKeyless(t, c, environ, engine.Turn{Prompt: "Run a command FAKE_TOOL"}, func(o *engine.RunOptions) { o.Secrets = mode })
					// Local leases in namespaces (isolation=auto where
					// bubblewrap works) enforce egress gateway, the
					// default then; with the key in the sandbox the
					// network stays open for the agent's own calls.
					want := engine.EgressOpen
					if local.New(nil).Capabilities().Egress && mode == engine.SecretsGateway {
						want = engine.EgressGateway
					}
					checkKeyless(t, r, fake, key, mode, want)
				})
			}
		})
	}
}

// checkKeyless checks a FAKE_TOOL turn run with testenv.KeylessProbe's probe in
// secrets mode mode: it succeeded with secrets mode and egress, every
// model request carried the real key, no request body holds it, and the
// probe found it nowhere in the sandbox (gateway: while the token is
// there) or found it (env: the check works).
func checkKeyless(t *testing.T, r keylessRun, fake keylessFake, key, mode, egress string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("turn: %v", r.err)
	}
	if r.res.Secrets != mode || r.res.Egress != egress {
		t.Errorf("result secrets %q egress %q, want %s and %s", r.res.Secrets, r.res.Egress, mode, egress)
	}
	creds := fake.credentials()
	if len(creds) < 2 {
		t.Fatalf("the fake got %d model requests, want the turn and the tool's follow-up", len(creds))
	}
	for i, got := range creds {
		if got != key {
			t.Errorf("request %d carried %q, want the real key", i+1, got)
		}
	}
	bodies := fake.bodies()
	// The token is in the turn's processes' environment, the key nowhere
	// (copilot keeps its provider variables from its tools: the tool's
	// own env shows neither); in env mode the same check finds the key (it
	// works).
	want := testenv.KeylessNoKey
	if mode == engine.SecretsEnv {
		want = regexp.MustCompile(`^env=[0-9]+ home=[0-9]+ procs=[1-9]`)
	}
	if got := testenv.KeylessProbeOutput.FindAllString(bodies, -1); len(got) == 0 || !want.MatchString(got[0]) {
		t.Errorf("the tool's output %q, want %s", got, want)
		for _, ev := range r.events {
			if ev.Tool != nil {
				t.Logf("%s %+v", ev.Type, *ev.Tool)
			}
		}
	}
	if strings.Contains(bodies, key) {
		t.Error("a request body holds the real key")
	}
}

// TestKeylessFailuresClassify: 429, 529 and 500 from the upstream pass
// through the gateway unchanged, and classify as without it (quota;
// process with details.unavailable).
func TestKeylessFailuresClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cli         int // index in keylessCLIs
		marker      string
		code        outpost.Code
		unavailable bool
	}{
		{0, "FAKE_429", outpost.Quota, false},
		{0, "FAKE_529", outpost.Process, true},
		{0, "FAKE_500", outpost.Process, true},
		{1, "FAKE_429", outpost.Quota, false},
		{1, "FAKE_500", outpost.Process, true},
		{2, markerFast429, outpost.Quota, false},
		{2, markerFast500, outpost.Process, true},
	} {
		c := keylessCLIs[tt.cli]
		t.Run(c.name+"/"+tt.marker, func(t *testing.T) {
			t.Parallel()
			key := "sk-kl-" + randomHex(t, 16)
			environ, _ := c.start(t, "true", key)
			r := runKeyless(t, c, environ, engine.Turn{Prompt: "fail " + tt.marker}, nil)
			var oe *outpost.Error
			if !errors.As(r.err, &oe) || oe.Code != tt.code {
				t.Fatalf("error %v, want code %s", r.err, tt.code)
			}
			if got, _ := oe.Details["unavailable"].(bool); got != tt.unavailable {
				t.Errorf("details.unavailable %v, want %v (details %v)", got, tt.unavailable, oe.Details)
			}
			if r.res == nil || r.res.Secrets != engine.SecretsGateway {
				t.Errorf("result %+v, want secrets gateway", r.res)
			}
		})
	}
}

// TestKeylessStructuredAndSteer: a structured answer with a repair, and a
// steered turn, through the gateway (claude: live input).
func TestKeylessStructuredAndSteer(t *testing.T) {
	t.Parallel()
	c := keylessCLIs[0]
	t.Run("structured with repair", func(t *testing.T) {
		t.Parallel()
		key := "sk-kl-" + randomHex(t, 16)
		environ, fake := c.start(t, "true", key)
		srv := fake.(anthropicFake).Server
		// The first answer does not match; the repair's does.
		// Invalid JSON twice (the answer, and the one after the CLI's own
		// re-prompt); outpost's repair gets the structured answer.
		srv.Enqueue(anthropic.Text("```json\n{\"name\": \"Linus\",\n```"), anthropic.Text("```json\n{\"name\": \"Linus\",\n```"),
			anthropic.StructuredOutput(map[string]any{"name": "Linus"}))
		r := runKeyless(t, c, environ, engine.Turn{Prompt: "name a kernel author", Output: []byte(personSchema)}, nil)
		if r.err != nil || string(r.res.Output) != `{"name":"Linus"}` || len(r.res.Attempts) != 2 {
			t.Fatalf("error %v, result %+v", r.err, r.res)
		}
		for _, got := range fake.credentials() {
			if got != key {
				t.Errorf("a request carried %q, want the real key", got)
			}
		}
	})
	t.Run("steer", func(t *testing.T) {
		t.Parallel()
		key := "sk-kl-" + randomHex(t, 16)
		environ, fake := c.start(t, "sleep 2", key)
		steer := make(chan string, 1)
		var once sync.Once
		r := runKeyless(t, c, environ, engine.Turn{Prompt: "Run a command FAKE_TOOL"}, func(o *engine.RunOptions) {
			o.Steer = steer
			on := o.OnEvent
			o.OnEvent = func(ev harness.Event) {
				on(ev)
				if ev.Type == harness.EventToolCall {
					once.Do(func() { steer <- "and also this" })
				}
			}
		})
		if r.err != nil || r.res.Steered != 1 {
			t.Fatalf("error %v, steered %d", r.err, r.res.Steered)
		}
		if !strings.Contains(fake.bodies(), "and also this") {
			t.Error("the message did not reach the model")
		}
		for _, got := range fake.credentials() {
			if got != key {
				t.Errorf("a request carried %q, want the real key", got)
			}
		}
	})
}
