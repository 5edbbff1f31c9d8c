package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
)

// fakeCLI is an npm platform package whose executable, bin/fakecli, runs
// the built outpost binary as the echo agent: an agent CLI only the
// bootstrap can provide.
func fakeCLI(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	files := []struct {
		name string
		mode int64
		body string
	}{
		{"package/package.json", 0o644, `{"name":"@fake/fakecli-linux-x64","version":"9.9.9"}`},
		{"package/bin/fakecli", 0o755, fmt.Sprintf("#!/bin/sh\nexec '%s' \"$@\"\n", outpostBinary(t))},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// tarballServer serves one file and counts its downloads.
type tarballServer struct {
	*httptest.Server
	hits atomic.Int64
}

func serveTarball(t testing.TB, body []byte) *tarballServer {
	s := &tarballServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// fakePins pins bootstrap name "claude" to the served package, with the
// given digest.
func fakePins(url string, d [64]byte) *bootstrap.Pins {
	return &bootstrap.Pins{Schema: bootstrap.SchemaVersion, Registry: bootstrap.DefaultRegistry, Agents: map[string]*bootstrap.Pin{
		"claude": {Kind: bootstrap.KindNPM, Version: "9.9.9", Program: "fakecli", Package: "@fake/fakecli", Platforms: map[string]*bootstrap.Artifact{
			"linux-x64":   {Package: "@fake/fakecli-linux-x64", Version: "9.9.9", URL: url, Integrity: bootstrap.Digest(d).SRI(), Bin: "bin/fakecli"},
			"linux-arm64": {Package: "@fake/fakecli-linux-arm64", Version: "9.9.9", URL: url, Integrity: bootstrap.Digest(d).SRI(), Bin: "bin/fakecli"},
		}},
	}}
}

// bootstrappedEcho is the echo preset running "fakecli", which no sandbox
// has, with bootstrap name "claude".
func bootstrappedEcho() *harness.Harness {
	h := echo.Harness()
	req := h.Request
	h.Request = func(in harness.Input) (harness.Command, error) {
		c, err := req(in)
		c.Path = "fakecli"
		return c, err
	}
	h.LiveInput = nil
	h.Bootstrap = "claude"
	return h
}

func bootstrapNotices(events []harness.Event) []bootstrap.Progress {
	var out []bootstrap.Progress
	for _, ev := range events {
		if p, ok := bootstrap.ProgressFromEvent(ev); ok {
			out = append(out, p)
		}
	}
	return out
}

func phases(ps []bootstrap.Progress) []bootstrap.Phase {
	var out []bootstrap.Phase
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.Phase {
			out = append(out, p.Phase)
		}
	}
	return out
}

// TestBootstrapTurnLocal: a turn whose CLI is missing installs the pinned
// package through the engine (step 5), reporting progress as bootstrap
// notices; the next turn installs it from the cache, downloading nothing.
func TestBootstrapTurnLocal(t *testing.T) {
	t.Parallel()
	pkg := fakeCLI(t)
	srv := serveTarball(t, pkg)
	inst := &bootstrap.Installer{Pins: fakePins(srv.URL+"/fakecli.tgz", sha512.Sum512(pkg)), CacheDir: t.TempDir()}
	// The fake CLI execs outpost from the test's build directory, which
	// an isolated lease does not see: the install is what this tests.
	lp := local.New(&local.Options{BaseDir: t.TempDir(), Isolation: "none"})
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	withInstaller := func(o *engine.RunOptions) { o.Installer = inst }

	res, err := f.run(lp, nil, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: bootstrappedEcho()}, Prompt: "hello"}, withInstaller)
	if err != nil {
		t.Fatal(err)
	}
	wantTurn(t, res, 1)
	ps := bootstrapNotices(f.events)
	want := []bootstrap.Phase{bootstrap.PhaseDownload, bootstrap.PhaseVerified, bootstrap.PhaseExtract, bootstrap.PhaseDone}
	if got := phases(ps); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bootstrap phases %v, want %v", got, want)
	}
	if last := ps[len(ps)-1]; last.Source != bootstrap.SourceDownload || last.Agent != "claude" || !strings.HasSuffix(last.Path, "/bin/fakecli") {
		t.Errorf("done notice %+v", last)
	}
	for _, ev := range f.events {
		if ev.Kind == bootstrap.NoticeKind && (ev.Agent != "echo" || ev.Conversation == "") {
			t.Errorf("notice %+v lacks the turn's agent or conversation", ev)
		}
	}

	res, err = f.run(lp, nil, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: bootstrappedEcho()}, Prompt: "again", Resume: res.Conversation}, withInstaller)
	if err != nil {
		t.Fatal(err)
	}
	wantTurn(t, res, 2)
	ps = bootstrapNotices(f.events)
	if len(ps) != 1 || ps[0].Phase != bootstrap.PhaseDone || ps[0].Source != bootstrap.SourceCache {
		t.Errorf("second turn's bootstrap notices %+v, want one done from the cache", ps)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
}

// TestBootstrapTurnDigestMismatch: the served package is not the pinned
// one. The turn fails with code bootstrap and details naming both digests,
// no agent runs, and nothing is installed or cached.
func TestBootstrapTurnDigestMismatch(t *testing.T) {
	t.Parallel()
	pkg := fakeCLI(t)
	srv := serveTarball(t, pkg)
	cache := t.TempDir()
	pinned := sha512.Sum512([]byte("the package the pin was reviewed with"))
	inst := &bootstrap.Installer{Pins: fakePins(srv.URL+"/fakecli.tgz", pinned), CacheDir: cache}
	lp := local.New(&local.Options{BaseDir: t.TempDir()})
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	_, err := f.run(lp, nil, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: bootstrappedEcho()}, Prompt: "hello"}, func(o *engine.RunOptions) { o.Installer = inst })
	if outpost.CodeOf(err) != outpost.Bootstrap || !errors.Is(err, bootstrap.ErrDigestMismatch) {
		t.Fatalf("err = %v, want code bootstrap and a digest mismatch", err)
	}
	var oe *outpost.Error
	errors.As(err, &oe)
	actual := sha512.Sum512(pkg)
	if oe.Details["expected"] != bootstrap.Digest(pinned).SRI() || oe.Details["actual"] != bootstrap.Digest(actual).SRI() || oe.Agent != "echo" {
		t.Errorf("error %+v, details %v", oe, oe.Details)
	}
	for _, ev := range f.events {
		if ev.Type != harness.EventNotice {
			t.Errorf("the agent ran: %+v", ev)
		}
	}
	assertNothingCached(t, cache)
}

func assertNothingCached(t *testing.T, cache string) {
	t.Helper()
	for _, d := range []string{"blobs", "trees"} {
		entries, _ := os.ReadDir(filepath.Join(cache, d))
		for _, e := range entries {
			t.Errorf("the cache holds %s/%s", d, e.Name())
		}
	}
}

// claudePreset returns the Claude Code preset, or skips loudly when it has
// not landed.
func claudePreset(t *testing.T) *harness.Harness {
	t.Helper()
	h, ok := presets.Lookup("claude")
	if !ok {
		testenv.Missing(t, "the claude preset (harness/claude registered in harness/presets)", "land the Claude Code preset")
	}
	return h
}

// TestBootstrapCLIDigestMismatch: `outpost run --json` on a pin whose
// download does not match exits with the bootstrap status and prints the
// expected and actual digests in the result line; nothing is installed.
func TestBootstrapCLIDigestMismatch(t *testing.T) {
	claudePreset(t)
	if p, err := exec.LookPath("claude"); err == nil {
		t.Skipf("claude is on PATH (%s): the turn would not bootstrap", p)
	}
	body := []byte("not the pinned package")
	srv := serveTarball(t, body)
	pinned := sha512.Sum512([]byte("the pinned package"))
	file := filepath.Join(t.TempDir(), "pins.json")
	over, _ := json.Marshal(fakePins(srv.URL+"/claude.tgz", pinned))
	if err := os.WriteFile(file, over, 0o644); err != nil {
		t.Fatal(err)
	}
	cacheRoot := t.TempDir()
	t.Setenv(bootstrap.PinsVariable, file)
	t.Setenv(bootstrap.CacheVariable, cacheRoot)
	t.Setenv("ANTHROPIC_API_KEY", "sk-fake")
	code, out, errOut := runOutpost(t, t.TempDir(), t.TempDir(), "run", "--agent", "claude", "--json", "hello")
	if code != outpost.ExitCode(outpost.ErrBootstrap) {
		t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, outpost.ExitCode(outpost.ErrBootstrap), out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Type  string
		Error struct {
			Code    string
			Details map[string]any
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatal(err)
	}
	d := res.Error.Details
	if res.Type != "result" || res.Error.Code != "bootstrap" || d["expected"] != bootstrap.Digest(pinned).SRI() || d["actual"] != bootstrap.Digest(sha512.Sum512(body)).SRI() {
		t.Errorf("result line %s", lines[len(lines)-1])
	}
	assertNothingCached(t, filepath.Join(cacheRoot, "bootstrap"))
}

// realClaude is what the real-claude tests share: the claude preset, the
// Debian test image, a docker provider on the host's network (the fake API
// listens on loopback), and the fake Anthropic API.
func realClaude(t *testing.T) (*harness.Harness, *docker.Provider, *anthropic.Server) {
	t.Helper()
	h := claudePreset(t)
	dockertest.Require(t, dockertest.Debian)
	p, err := docker.New(&docker.Options{Image: dockertest.Debian, Binary: outpostBinary(t), Network: "host"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return h, p, anthropic.New(t, anthropic.Options{})
}

// TestBootstrapRealClaudeDocker bootstraps the real pinned Claude Code
// from the npm registry (into the host cache shared by every run:
// $OUTPOST_CACHE/bootstrap, so CI downloads its 186 MB once) into a
// container of an image that has no claude, and runs a turn with it
// against the fake Anthropic API: mounted from the cache, then copied into
// a lease that has no mount, then through the outpost command.
func TestBootstrapRealClaudeDocker(t *testing.T) {
	h, p, api := realClaude(t)
	environ := []string{"PATH=" + os.Getenv("PATH"), "ANTHROPIC_API_KEY=sk-fake", "ANTHROPIC_BASE_URL=" + api.URL()}
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	ctx := context.Background()

	t.Run("mounted", func(t *testing.T) {
		res, err := f.run(p, nil, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: h}, Prompt: "say hi"}, func(o *engine.RunOptions) { o.Environ = environ })
		if err != nil {
			t.Fatalf("%v\nevents: %+v", err, f.events)
		}
		if res.Text != anthropic.DefaultText || res.Usage.InputTokens != anthropic.DefaultInputTokens {
			t.Errorf("result %+v", res)
		}
		ps := bootstrapNotices(f.events)
		if len(ps) == 0 {
			t.Fatal("no bootstrap: the image already has claude?")
		}
		done := ps[len(ps)-1]
		if done.Phase != bootstrap.PhaseDone || !strings.HasPrefix(done.Path, bootstrap.MountPath+"/") || done.Version != testenv.CLIVersion("claude") {
			t.Errorf("done notice %+v: want the pinned claude run from the mounted cache", done)
		}
	})

	t.Run("copied", func(t *testing.T) {
		// A lease without the cache mount (a remote engine's): the CLI is
		// copied into the container's home.
		l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: f.workdir})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		got, err := (&bootstrap.Installer{}).Install(ctx, l, "claude", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Mounted || got.Source != bootstrap.SourceCache || got.Path != l.Home()+"/.outpost/bootstrap/claude@"+testenv.CLIVersion("claude")+"/bin/claude" {
			t.Errorf("install %+v", got)
		}
		res, err := f.run(nil, l, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: h}, Prompt: "say hi"}, func(o *engine.RunOptions) { o.Environ = environ })
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != anthropic.DefaultText {
			t.Errorf("result %+v", res)
		}
		if ps := bootstrapNotices(f.events); len(ps) != 1 || ps[0].Source != bootstrap.SourceSandbox {
			t.Errorf("the turn on the lease re-installed: %+v", ps)
		}
	})

	t.Run("command", func(t *testing.T) {
		home, dir := t.TempDir(), t.TempDir()
		code, out, errOut := runOutpost(t, home, dir, "bootstrap", "claude", "--sandbox", "docker", "--image", dockertest.Debian, "--json")
		if code != 0 {
			t.Fatalf("outpost bootstrap: exit %d\n%s\n%s", code, out, errOut)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		var last string
		for sc.Scan() {
			last = sc.Text()
		}
		var line struct {
			Type, Check, Version string
			Error                any
		}
		if err := json.Unmarshal([]byte(last), &line); err != nil || line.Type != "result" || line.Error != nil ||
			line.Check != testenv.CLIVersion("claude")+" (Claude Code)" {
			t.Fatalf("result line %s (%v)", last, err)
		}
		t.Setenv("ANTHROPIC_API_KEY", "sk-fake")
		t.Setenv("ANTHROPIC_BASE_URL", api.URL())
		// The image has no claude: the turn installs it from the cache
		// `outpost bootstrap` filled, which --json reports as a bootstrap
		// notice (a person sees no line for a cached CLI).
		code, out, errOut = runOutpost(t, home, dir, "run", "--json", "--agent", "claude", "--sandbox", "docker", "--image", dockertest.Debian, "--set", "network=host", "say hi")
		if code != 0 || lastResultLine(t, out)["text"] != anthropic.DefaultText || !strings.Contains(out, `"kind":"bootstrap"`) || !strings.Contains(out, `"source":"cache"`) {
			t.Fatalf("outpost run: exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})
}

// BenchmarkBootstrap measures installing the pinned Claude Code into a
// sandbox from a warm host cache, against `npm install` of the same
// version (docs/benchmarks.md, "Bootstrap"). Run with
//
//	go test ./integration -run '^$' -bench Bootstrap -benchtime 5x
func BenchmarkBootstrap(b *testing.B) {
	version := testenv.CLIVersion("claude")
	inst := &bootstrap.Installer{}
	ctx := context.Background()
	if _, err := inst.Prefetch(ctx, "claude", bootstrap.HostPlatform(), nil); err != nil {
		b.Fatal(err)
	}
	install := func(b *testing.B, p driver.Provider, opts driver.Options) {
		for b.Loop() {
			b.StopTimer()
			l, err := sandbox.Acquire(ctx, p, opts)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			res, err := inst.Ensure(ctx, l, "claude", "claude", nil)
			b.StopTimer()
			if err != nil || !strings.HasSuffix(res, "/bin/claude") {
				b.Fatal(res, err)
			}
			l.Close(ctx)
			b.StartTimer()
		}
	}
	b.Run("cached/local", func(b *testing.B) {
		install(b, local.New(&local.Options{BaseDir: b.TempDir()}), driver.Options{Workdir: b.TempDir()})
	})
	b.Run("cached/docker-mount", func(b *testing.B) {
		p := benchDocker(b)
		host, target, err := inst.SharedCache()
		if err != nil {
			b.Fatal(err)
		}
		install(b, p, driver.Options{Workdir: b.TempDir(), Mounts: []driver.Mount{{Source: host, Target: target}}})
	})
	b.Run("cached/docker-copy", func(b *testing.B) {
		install(b, benchDocker(b), driver.Options{Workdir: b.TempDir()})
	})
	if _, err := exec.LookPath("npm"); err != nil {
		b.Log("no npm: skipping the npm baseline")
		return
	}
	npm := func(b *testing.B, warmCache string) {
		for b.Loop() {
			b.StopTimer()
			prefix, cache := b.TempDir(), warmCache
			if cache == "" {
				cache = b.TempDir() // cold: a fresh npm cache every time
			}
			b.StartTimer()
			out, err := exec.Command("npm", "install", "--prefix", prefix, "--cache", cache, "--no-save", "--no-audit", "--no-fund",
				"--loglevel=error", "@anthropic-ai/claude-code@"+version).CombinedOutput()
			if err != nil {
				b.Fatalf("npm install: %v\n%s", err, out)
			}
		}
	}
	b.Run("npm-install/cold", func(b *testing.B) { npm(b, "") })
	b.Run("npm-install/warm", func(b *testing.B) {
		cache := b.TempDir()
		if out, err := exec.Command("npm", "cache", "add", "--cache", cache, "@anthropic-ai/claude-code@"+version, "@anthropic-ai/claude-code-linux-x64@"+version).CombinedOutput(); err != nil {
			b.Fatalf("npm cache add: %v\n%s", err, out)
		}
		npm(b, cache)
	})
}

func benchDocker(b *testing.B) *docker.Provider {
	b.Helper()
	dockertest.Require(b, dockertest.Debian)
	p, err := docker.New(&docker.Options{Image: dockertest.Debian, Binary: outpostBinary(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}
