package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/antigravity"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
)

// agyKey is the API key the antigravity tests pass; the stand-in quotes it
// back on request (AGY_LEAK), so the tests prove it is redacted.
const agyKey = "agy-test-key-77d1e0"

// agyBinDir builds the scripted stand-in for agy
// (harness/antigravity/testdata/agy: the real CLI cannot be had here) into
// a directory of the test, where it is "agy", and returns the directory.
func agyBinDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "agy"), "github.com/outposthq/outpost/harness/antigravity/testdata/agy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static: it also runs in containers
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the agy stand-in: %v\n%s", err, out)
	}
	return dir
}

// agyEnv runs the antigravity preset through the engine on the local
// provider, with the stand-in on the sandbox's PATH.
type agyEnv struct {
	t       *testing.T
	binDir  string
	base    string
	prov    driver.Provider
	store   *conversation.FS
	workdir string
}

func newAgyEnv(t *testing.T, binDir string) *agyEnv {
	e := &agyEnv{t: t, binDir: binDir, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	e.fresh()
	return e
}

func (e *agyEnv) fresh() {
	e.base = e.t.TempDir()
	e.prov = local.New(&local.Options{BaseDir: e.base, Environ: []string{"PATH=" + e.binDir + string(os.PathListSeparator) + os.Getenv("PATH")}})
}

type agyTurn struct {
	res    *engine.Result
	err    error
	events []harness.Event
	stderr string
}

func (tr agyTurn) of(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range tr.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *agyEnv) run(t engine.Turn) agyTurn {
	e.t.Helper()
	t.Agent = harness.Agent{Kind: "cli", Harness: antigravity.Harness()}
	if t.Workdir == "" {
		t.Workdir = e.workdir
	}
	t.Timeout = time.Minute
	var mu sync.Mutex
	var out agyTurn
	var stderr lockedBuffer
	o := &engine.RunOptions{Provider: e.prov, Store: e.store, Environ: []string{"GEMINI_API_KEY=" + agyKey}, Stderr: &stderr, Raw: true,
		OnEvent: func(ev harness.Event) {
			mu.Lock()
			out.events = append(out.events, ev)
			mu.Unlock()
		}}
	out.res, out.err = engine.Run(context.Background(), t, o)
	out.stderr = stderr.String()
	b, _ := json.Marshal(struct {
		E []harness.Event
		R *engine.Result
	}{out.events, out.res})
	var oe *outpost.Error
	var d []byte
	if errors.As(out.err, &oe) {
		d, _ = json.Marshal(oe.Details)
	}
	if bytes.Contains(b, []byte(agyKey)) || bytes.Contains(d, []byte(agyKey)) || strings.Contains(out.stderr, agyKey) || (out.err != nil && strings.Contains(out.err.Error(), agyKey)) {
		e.t.Errorf("the API key appears in what outpost gave the caller")
	}
	return out
}

// TestAntigravity runs the antigravity preset through the engine against
// the scripted stand-in of agy (the real CLI cannot be had here; see
// docs/presets/antigravity.md).
func TestAntigravity(t *testing.T) {
	t.Parallel()
	bin := agyBinDir(t)
	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		e := newAgyEnv(t, bin)
		tr := e.run(engine.Turn{Prompt: "Say hello AGY_ENV AGY_CLI_DISABLE_AUTO_UPDATE AGY_ENV GEMINI_API_KEY"})
		if tr.err != nil {
			t.Fatalf("turn failed: %v", tr.err)
		}
		if !strings.HasPrefix(tr.res.Text, "agy: Say hello") || !strings.Contains(tr.res.Text, "(turn 1)") {
			t.Errorf("text %q", tr.res.Text)
		}
		if !strings.Contains(tr.res.Text, "AGY_CLI_DISABLE_AUTO_UPDATE is set") || !strings.Contains(tr.res.Text, "GEMINI_API_KEY is set") {
			t.Errorf("the auto-update switch or the key did not reach agy: %q", tr.res.Text)
		}
		want := harness.Usage{InputTokens: 200, OutputTokens: 30, CacheReadTokens: 1000, Complete: true}
		if tr.res.Usage != want {
			t.Errorf("usage %+v, want %+v", tr.res.Usage, want)
		}
		if s := tr.of(harness.EventSession); len(s) != 1 || s[0].Session != tr.res.Session || tr.res.Session == "" {
			t.Errorf("session events %+v, result session %q", s, tr.res.Session)
		}
		m, files, err := e.store.Get(context.Background(), tr.res.Conversation)
		if err != nil || m.Native != tr.res.Session || len(files) != 1 || !strings.HasSuffix(files[0].Path, "/.system_generated/logs/transcript.jsonl") {
			t.Errorf("stored %+v %v: %v", m, files, err)
		}
	})

	t.Run("Tool", func(t *testing.T) {
		t.Parallel()
		tr := newAgyEnv(t, bin).run(engine.Turn{Prompt: "Run it AGY_TOOL"})
		if tr.err != nil {
			t.Fatalf("turn failed: %v", tr.err)
		}
		calls, results := tr.of(harness.EventToolCall), tr.of(harness.EventToolResult)
		if len(calls) != 1 || calls[0].Tool.Name != "run_command" || len(results) != 1 || results[0].Tool.Output != "hi\n" {
			t.Errorf("calls %+v results %+v", calls, results)
		}
	})

	t.Run("ResumeOnAFreshSandbox", func(t *testing.T) {
		t.Parallel()
		e := newAgyEnv(t, bin)
		first := e.run(engine.Turn{Prompt: "First turn"})
		if first.err != nil {
			t.Fatalf("first turn: %v", first.err)
		}
		e.fresh()
		second := e.run(engine.Turn{Prompt: "Second turn", Resume: first.res.Conversation})
		if second.err != nil {
			t.Fatalf("resumed turn: %v", second.err)
		}
		if second.res.Session != first.res.Session || !strings.Contains(second.res.Text, "(turn 2)") {
			t.Errorf("session %q text %q", second.res.Session, second.res.Text)
		}
		m, _, err := e.store.Get(context.Background(), first.res.Conversation)
		if err != nil || m.Turns != 2 || m.Usage.InputTokens != 400 {
			t.Errorf("stored %+v: %v", m, err)
		}
	})

	t.Run("ResumeLost", func(t *testing.T) {
		t.Parallel()
		e := newAgyEnv(t, bin)
		first := e.run(engine.Turn{Prompt: "First turn"})
		if first.err != nil {
			t.Fatalf("first turn: %v", first.err)
		}
		tr := e.run(engine.Turn{Prompt: "Second turn AGY_FORGET", Resume: first.res.Conversation})
		if outpost.CodeOf(tr.err) != outpost.Process {
			t.Fatalf("err %v, want code process: agy started a new conversation", tr.err)
		}
		if f := tr.of(harness.EventFailure); len(f) != 1 || f[0].Kind != "resume_lost" {
			t.Errorf("failures %+v", f)
		}
		m, _, err := e.store.Get(context.Background(), first.res.Conversation)
		if err != nil || m.Native != first.res.Session {
			t.Errorf("the stored conversation lost its native id: %+v %v", m, err)
		}
	})

	t.Run("ForkRefusedBeforeAllocation", func(t *testing.T) {
		t.Parallel()
		e := newAgyEnv(t, bin)
		first := e.run(engine.Turn{Prompt: "hello"})
		if first.err != nil {
			t.Fatal(first.err)
		}
		e.fresh()
		tr := e.run(engine.Turn{Prompt: "fork", Fork: first.res.Conversation})
		if outpost.CodeOf(tr.err) != outpost.Refused || tr.res != nil || len(tr.events) != 0 {
			t.Fatalf("fork: %v %+v %d events", tr.err, tr.res, len(tr.events))
		}
		if entries, _ := os.ReadDir(e.base); len(entries) != 0 {
			t.Errorf("a sandbox was allocated for a refused fork")
		}
	})

	for _, tc := range []struct {
		name, prompt string
		code         outpost.Code
		unavailable  bool
		check        func(t *testing.T, tr agyTurn, oe *outpost.Error)
	}{
		{"QuotaExit3", "x AGY_QUOTA", outpost.Quota, false, func(t *testing.T, tr agyTurn, oe *outpost.Error) {
			r, _ := oe.Details["resets_at"].(string)
			at, err := time.Parse(time.RFC3339, r)
			want := time.Now().Add(146*time.Hour + 14*time.Minute)
			if err != nil || at.Before(want.Add(-time.Minute)) || at.After(want.Add(time.Minute)) {
				t.Errorf("resets_at %q, want about %v", r, want.UTC())
			}
			if oe.Details["exit_code"] != 3 {
				t.Errorf("exit_code %v", oe.Details["exit_code"])
			}
		}},
		{"OutageExit3", "x AGY_OUTAGE", outpost.Process, true, nil},
		{"AuthExit3", "x AGY_AUTH", outpost.Process, false, nil},
		{"ResultError", "x AGY_RESULT_ERROR", outpost.Process, true, nil},
		{"EmptyExit0", "x AGY_EMPTY", outpost.Process, false, func(t *testing.T, tr agyTurn, oe *outpost.Error) {
			if oe.Details["finished"] != false || tr.res.Exit == nil || tr.res.Exit.Code != 0 {
				t.Errorf("details %v exit %+v: exit 0 without output must fail for the missing final event", oe.Details, tr.res.Exit)
			}
		}},
		{"PermissionDenied", "x AGY_DENIED", outpost.Process, false, func(t *testing.T, tr agyTurn, oe *outpost.Error) {
			if f := tr.of(harness.EventFailure); len(f) != 1 || f[0].Kind != "permission_denied" {
				t.Errorf("failures %+v", f)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newAgyEnv(t, bin).run(engine.Turn{Prompt: tc.prompt})
			var oe *outpost.Error
			if !errors.As(tr.err, &oe) || oe.Code != tc.code {
				t.Fatalf("err %v, want code %s", tr.err, tc.code)
			}
			if outpost.UnavailableFault(tr.err) != tc.unavailable {
				t.Errorf("unavailable = %v, want %v (%v)", outpost.UnavailableFault(tr.err), tc.unavailable, tr.err)
			}
			if tc.check != nil {
				tc.check(t, tr, oe)
			}
		})
	}

	t.Run("SecretIsRedacted", func(t *testing.T) {
		t.Parallel()
		tr := newAgyEnv(t, bin).run(engine.Turn{Prompt: "show AGY_LEAK GEMINI_API_KEY"})
		if tr.err != nil {
			t.Fatal(tr.err)
		}
		if !strings.Contains(tr.res.Text, "GEMINI_API_KEY=") || !strings.Contains(tr.stderr, "GEMINI_API_KEY=") {
			t.Errorf("the stand-in did not quote the key: %q / %q", tr.res.Text, tr.stderr)
		}
	})
}

// TestAntigravityArchiveBootstrap installs the stand-in the way the real
// agy is installed: a tar.gz holding one file, "antigravity", served over
// HTTP and pinned by its SHA-512 (the pin file's antigravity entry, here
// replaced by a test pin), into a sandbox whose PATH has no agy; then the
// turn runs it as agy. A wrong digest installs nothing and fails the turn
// with code bootstrap before the agent starts.
func TestAntigravityArchiveBootstrap(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the test pin is for linux-x64")
	}
	exe, err := os.ReadFile(filepath.Join(agyBinDir(t), "agy"))
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	gz := gzip.NewWriter(&archive)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "antigravity", Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(exe)
	tw.Close()
	gz.Close()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write(archive.Bytes())
	}))
	t.Cleanup(srv.Close)
	sum := sha512.Sum512(archive.Bytes())
	pins := func(digest string) *bootstrap.Pins {
		return &bootstrap.Pins{Schema: bootstrap.SchemaVersion, Agents: map[string]*bootstrap.Pin{antigravity.Name: {
			Kind: bootstrap.KindArchive, Version: antigravity.Version, Program: antigravity.Program,
			Platforms: map[string]*bootstrap.Artifact{"linux-x64": {URL: srv.URL + "/cli_linux_x64.tar.gz", SHA512: digest, Bin: "antigravity"}},
		}}}
	}
	run := func(inst *bootstrap.Installer, p driver.Provider) (*engine.Result, error) {
		if p == nil {
			p = local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=/usr/bin:/bin"}})
		}
		return engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: antigravity.Harness()}, Prompt: "Say hello", Workdir: t.TempDir(), Timeout: time.Minute},
			&engine.RunOptions{Provider: p, Store: conversation.NewFS(t.TempDir()), Installer: inst,
				Environ: append(os.Environ(), "GEMINI_API_KEY="+agyKey)}) // the preflight wants a credential
	}

	bad := &bootstrap.Installer{Pins: pins(strings.Repeat("0", 128)), CacheDir: t.TempDir()}
	res, err := run(bad, nil)
	if outpost.CodeOf(err) != outpost.Bootstrap || (res != nil && res.Exit != nil) {
		t.Fatalf("a wrong digest: %v %+v, want code bootstrap and no agent run", err, res)
	}

	good := &bootstrap.Installer{Pins: pins(hex.EncodeToString(sum[:])), CacheDir: t.TempDir()}
	for i := range 2 {
		res, err := run(good, nil)
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		if !strings.HasPrefix(res.Text, "agy: Say hello") {
			t.Errorf("turn %d: text %q", i+1, res.Text)
		}
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d downloads, want 2: one for the bad pin, one for the good, the second turn from the cache", n)
	}

	t.Run("Docker", func(t *testing.T) {
		// The same pin into a container of the busybox image (the stand-in
		// is static), from the host cache.
		dockertest.Require(t, dockertest.Busybox)
		p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Binary = outpostBinary(t) })
		res, err := run(good, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox != "docker" || !strings.HasPrefix(res.Text, "agy: Say hello") {
			t.Errorf("result %+v", res)
		}
		if n := requests.Load(); n != 2 {
			t.Errorf("%d downloads: the container's install did not come from the cache", n)
		}
	})
}
