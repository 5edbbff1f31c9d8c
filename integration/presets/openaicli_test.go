package presets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The OpenAI-compatible CLIs (Qwen Code, OpenCode) against the fake Chat
// Completions API: the real CLI, the preset's declarative file, local and
// docker sandboxes. On docker the CLI is not in the image: the turn's
// bootstrap installs the pinned package from npm (mounted from the host
// cache) into a container of nodeImage.

// oaiModel is the model name the tests set in OPENAI_MODEL.
const oaiModel = "gpt-fake"

// oaiEnv is one test's world: a fake, a store shared by every provider
// of the test (a conversation moves between them), and the variables.
type oaiEnv struct {
	t     *testing.T
	h     *harness.Harness
	bin   string // the pinned CLI's directory of executables (local)
	fake  *openai.Server
	store *conversation.FS
	key   string
	vars  map[string]string
	// sshImage is the ssh host's image: sshtest.Image (Debian's node
	// 18, enough for OpenCode's native binary), or sshtest.NodeImage
	// for the CLIs that need node 20 (Qwen Code).
	sshImage string
}

func newOAIEnv(t *testing.T, h *harness.Harness, bin string, cfg openai.Config) *oaiEnv {
	t.Helper()
	e := &oaiEnv{t: t, h: h, bin: bin, fake: openai.Start(t, cfg), store: conversation.NewFS(t.TempDir()), key: "sk-oai-fake-" + randomHex(t, 12),
		sshImage: sshtest.Image}
	e.vars = map[string]string{
		"OPENAI_BASE_URL": e.fake.URL(),
		"OPENAI_API_KEY":  e.key,
		"OPENAI_MODEL":    oaiModel,
		"HOME":            t.TempDir(),
	}
	return e
}

// provider returns a new sandbox provider of kind, sharing nothing with
// the env's other providers but the store.
func (e *oaiEnv) provider(kind string) driver.Provider {
	e.t.Helper()
	switch kind {
	case "local":
		// The CLI's directory, then the host's node (Qwen Code's
		// interpreter).
		path := e.bin + ":/usr/local/bin:/usr/bin:/bin"
		return local.New(&local.Options{BaseDir: e.t.TempDir(), Environ: []string{"PATH=" + path, "LANG=C.UTF-8"}})
	case "docker":
		dockertest.Require(e.t, dockertest.Debian)
		return dockertest.Provider(e.t, nodeImage(e.t), func(o *docker.Options) { o.Network = "host" })
	case "ssh":
		// The shared sshd of the env's image (Debian: glibc), the
		// in-sandbox binary copied there; the fake is reached through a
		// relay.
		return sshtest.Provider(e.t, sshtest.SharedImage(e.t, e.sshImage), sshtest.Patient)
	}
	e.t.Fatalf("unknown provider %q", kind)
	return nil
}

// workdir is a new working directory on the host (docker mounts it at
// docker.Workspace).
func (e *oaiEnv) workdir() string { return e.t.TempDir() }

// run runs one turn on a new sandbox of kind. Every event (with its raw
// line), the result and the error are checked for the API key.
func (e *oaiEnv) run(kind string, tn engine.Turn) *outcome {
	e.t.Helper()
	tn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: e.h, Model: tn.Agent.Model}
	if tn.Workdir == "" {
		tn.Workdir = e.workdir()
	}
	if tn.Timeout == 0 {
		tn.Timeout = 10 * time.Minute // the shared test machine runs at load 20 and more
	}
	var environ []string
	for k, v := range e.vars {
		if k == "OPENAI_BASE_URL" && kind == "ssh" {
			// The sshd container reaches the fake only through a relay on
			// the Docker bridge.
			v = "http://" + sshtest.SharedImage(e.t, e.sshImage).Relay(e.t, strings.TrimPrefix(e.fake.Root(), "http://")) + "/v1"
		}
		environ = append(environ, k+"="+v)
	}
	o := &outcome{}
	var mu sync.Mutex
	res, err := engine.Run(context.Background(), tn, &engine.RunOptions{
		Provider: e.provider(kind), Store: e.store, Environ: environ, Raw: true, Grace: time.Second, Logger: testenv.FailureLog(e.t, e.key),
		OnEvent: func(ev harness.Event) {
			mu.Lock()
			o.events = append(o.events, ev)
			mu.Unlock()
		},
	})
	o.res, o.err = res, err
	b, _ := json.Marshal(struct {
		R *engine.Result
		E []harness.Event
	}{res, o.events})
	if strings.Contains(string(b), e.key) || err != nil && strings.Contains(err.Error(), e.key) {
		e.t.Errorf("the API key shows in the events, result or error")
	}
	return o
}

func (e *oaiEnv) mustSucceed(o *outcome) {
	e.t.Helper()
	if o.err != nil {
		e.t.Fatalf("turn failed: %v\nevents: %s", o.err, eventSummary(o.events))
	}
}

// fakeUsageOf is the usage the fake reported for its successful replies
// (Chat Completions: prompt_tokens and cached_tokens, completion_tokens).
func (e *oaiEnv) fakeUsageOf(reqs int) harness.Usage {
	u := openai.DefaultUsage
	return harness.Usage{InputTokens: int64(reqs * u.InputTokens), OutputTokens: int64(reqs * u.OutputTokens),
		CacheReadTokens: int64(reqs * u.CachedTokens), Complete: true}
}

// nodeImage is outpost/debian:test with the host's node at
// /usr/local/bin/node: Qwen Code 0.24.4 and Gemini CLI 0.61.0 need node
// >= 20 (Debian 12's node 18 lacks fs.openAsBlob and the regular
// expression flags they use). It holds no agent CLI; its name comes from
// the base image and the node binary, so it is built once.
func nodeImage(t testing.TB) string {
	t.Helper()
	nodeImageOnce.Do(func() { nodeImageName, nodeImageErr = buildNodeImage() })
	if nodeImageErr != nil {
		t.Fatal(nodeImageErr)
	}
	return nodeImageName
}

var (
	nodeImageOnce sync.Once
	nodeImageName string
	nodeImageErr  error
)

func buildNodeImage() (string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("no node on the host to put into the image: %w", err)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		return "", err
	}
	fi, err := os.Stat(node)
	if err != nil {
		return "", err
	}
	base, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", dockertest.Debian).Output()
	if err != nil {
		return "", fmt.Errorf("inspecting %s: %w", dockertest.Debian, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d", strings.TrimSpace(string(base)), fi.Size(), fi.ModTime().UnixNano()))
	name := "outpost/node-test:" + hex.EncodeToString(sum[:6])
	if exec.Command("docker", "image", "inspect", name).Run() == nil {
		return name, nil
	}
	dir, err := os.MkdirTemp("", "outpost-node-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := copyFile(node, filepath.Join(dir, "node")); err != nil {
		return "", err
	}
	df := "FROM " + dockertest.Debian + "\nCOPY node /usr/local/bin/node\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("docker", "build", "-q", "-t", name, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build %s: %v\n%s", name, err, out)
	}
	return name, nil
}

// toolEvents returns the tool calls and results of o, in order.
func toolEvents(o *outcome) []harness.Event {
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Type == harness.EventToolCall || ev.Type == harness.EventToolResult {
			out = append(out, ev)
		}
	}
	return out
}

// TestOpenAICLIBootstrapCommand: `outpost bootstrap NAME` downloads the
// pinned package (checked against its SHA-512), installs it into a fresh
// docker sandbox and runs its --version: Qwen Code into the node image
// (it needs node ≥ 20), OpenCode's native binary into plain
// outpost/debian:test.
func TestOpenAICLIBootstrapCommand(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Debian)
	for _, c := range []struct{ name, image, check string }{
		{"qwen", nodeImage(t), testenv.CLIVersion("qwen")},
		{"opencode", dockertest.Debian, testenv.CLIVersion("opencode")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// An empty cache: the package is downloaded and verified.
			env := []string{"OUTPOST_CACHE=" + t.TempDir()}
			code, out, errOut := runOutpostEnv(t, t.TempDir(), t.TempDir(), env, "bootstrap", c.name, "--sandbox", "docker", "--image", c.image, "--json")
			if code != 0 {
				t.Fatalf("outpost bootstrap %s: exit %d\n%s\n%s", c.name, code, out, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var res struct {
				Type, Check, Version, Digest string
				Error                        any
			}
			pins, err := bootstrap.Embedded()
			if err != nil {
				t.Fatal(err)
			}
			want := pins.Agents[c.name].Platforms["linux-x64"].Integrity
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Type != "result" || res.Error != nil ||
				!strings.Contains(res.Check, c.check) || res.Digest != want {
				t.Fatalf("result line %s (%v)", lines[len(lines)-1], err)
			}
			if !strings.Contains(out, "verified") {
				t.Errorf("no verification notice:\n%s", out)
			}
		})
	}
}

// testOAIOutage: 503 on every request, and a base URL nothing listens on:
// code process with details.unavailable, the CLI having given up by
// itself (not stopped by the retry bound).
func testOAIOutage(t *testing.T, kind string, newEnv func(*testing.T) *oaiEnv) {
	for _, c := range []struct{ name, prompt string }{{"503", "FAKE_503 say hi"}, {"connection refused", "say hi"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if c.name == "connection refused" {
				url, err := openai.RefusedURL()
				if err != nil {
					t.Fatal(err)
				}
				e.vars["OPENAI_BASE_URL"] = url
			}
			o := e.run(kind, engine.Turn{Prompt: c.prompt})
			if outpost.CodeOf(o.err) != outpost.Process || !outpost.UnavailableFault(o.err) {
				t.Fatalf("error %v, want code process with details.unavailable; events %s", o.err, eventSummary(o.events))
			}
			var oe *outpost.Error
			if errors.As(o.err, &oe) && oe.Details["retrying"] == true {
				t.Errorf("the retry bound stopped the CLI (details %v): it should give up by itself", oe.Details)
			}
		})
	}
}

// checkHistory checks the first model request of a resumed turn: it
// carried n messages, among them the user's prompts, the earlier ones
// first (the history the conversation brought along).
func checkHistory(t *testing.T, reqs []openai.Request, n int, prompts ...string) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatalf("no model request")
	}
	all := strings.Join(reqs[0].UserTexts, "\n")
	at := 0
	for _, p := range prompts {
		i := strings.Index(all[at:], p)
		if i < 0 {
			t.Errorf("the history did not reach the model: %q lacks %q (in order) of %q", reqs[0].UserTexts, p, prompts)
			return
		}
		at += i + len(p)
	}
	if reqs[0].NumInput != n {
		t.Errorf("the model got %d messages, want %d (user texts %q)", reqs[0].NumInput, n, reqs[0].UserTexts)
	}
}
