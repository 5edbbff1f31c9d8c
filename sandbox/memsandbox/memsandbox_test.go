package memsandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/memsandbox"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// programs maps the suite's programs to the default table.
var programs = map[sandboxtest.Program]string{
	sandboxtest.Echo:      "echo",
	sandboxtest.Stderr:    "stderr",
	sandboxtest.Cat:       "cat",
	sandboxtest.Exit:      "exit",
	sandboxtest.Env:       "getenv",
	sandboxtest.Pwd:       "pwd",
	sandboxtest.Sleep:     "sleep",
	sandboxtest.WriteFile: "writefile",
	sandboxtest.ReadFile:  "readfile",
	sandboxtest.Spawn:     "spawn",
	sandboxtest.Big:       "big",
	sandboxtest.Mode:      "mode",
}

func command(p sandboxtest.Program, args ...string) driver.ExecRequest {
	name, ok := programs[p]
	if !ok {
		panic("no memsandbox program for " + p.String())
	}
	return driver.ExecRequest{Path: name, Args: args}
}

// TestConformance runs the suite in a parallel test: providers' tests run
// their suites beside each other (providers/docker's four).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, p := range sandboxtest.Programs() {
		if _, ok := programs[p]; !ok {
			t.Fatalf("no memsandbox program for %v", p)
		}
	}
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			p := memsandbox.New(nil)
			t.Cleanup(func() {
				if n := p.Live(); n != 0 {
					t.Errorf("%d sandboxes left open", n)
				}
			})
			return p
		},
		Command: command,
		Vanish: func(t *testing.T, l *sandbox.Lease) {
			if err := l.Provider().(*memsandbox.Provider).Remove(l.ID()); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func acquire(t *testing.T, p driver.Provider) *sandbox.Lease {
	t.Helper()
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func env(l *sandbox.Lease) map[string]string {
	m := map[string]string{}
	for k, v := range l.Environment().Defaults {
		m[k] = v
	}
	for k, v := range l.Environment().Fixed {
		m[k] = v
	}
	return m
}

func TestRegistry(t *testing.T) {
	p, err := sandbox.Open("memory", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "memory" {
		t.Errorf("Name() = %q", p.Name())
	}
	if _, err := sandbox.Open("memory", map[string]string{"image": "x"}); err == nil {
		t.Error("an unknown setting was accepted")
	}
}

func TestCounters(t *testing.T) {
	p := memsandbox.New(nil)
	if p.Opens() != 0 || p.Live() != 0 {
		t.Fatalf("new provider: Opens %d, Live %d", p.Opens(), p.Live())
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := sandbox.Acquire(ctx, p, driver.Options{}); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	if p.Opens() != 1 || p.Live() != 0 {
		t.Errorf("after a cancelled Open: Opens %d, Live %d, want 1, 0", p.Opens(), p.Live())
	}
	a, err := sandbox.Acquire(t.Context(), p, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sandbox.Acquire(t.Context(), p, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Opens() != 3 || p.Live() != 2 {
		t.Errorf("two leases: Opens %d, Live %d, want 3, 2", p.Opens(), p.Live())
	}
	a.Close(context.Background())
	a.Close(context.Background())
	if p.Live() != 1 {
		t.Errorf("after closing one lease twice: Live %d, want 1", p.Live())
	}
	b.Close(context.Background())
	if p.Live() != 0 {
		t.Errorf("after closing both: Live %d", p.Live())
	}
}

func TestWorkdir(t *testing.T) {
	p := memsandbox.New(nil)
	// The portable layer fills in the default: the current directory.
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ given, want string }{
		{"", cwd},
		{"relative/dir", memsandbox.DefaultDir},
		{"/src/project/", "/src/project"},
	} {
		l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: tc.given, Labels: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Workdir(); got != tc.want {
			t.Errorf("Workdir for %q = %q, want %q", tc.given, got, tc.want)
		}
		sb := l.Sandbox().(*memsandbox.Sandbox)
		if fi, err := sb.FS().Stat(tc.want); err != nil || !fi.IsDir() {
			t.Errorf("working directory %s: %v", tc.want, err)
		}
		if diff := cmp.Diff(map[string]string{"k": "v"}, sb.Labels()); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
		l.Close(context.Background())
	}
}

// TestRemove makes a sandbox vanish during a process.
func TestRemove(t *testing.T) {
	p := memsandbox.New(nil)
	l := acquire(t, p)
	proc, err := l.Start(t.Context(), driver.ExecRequest{Path: "sleep", Args: []string{"3600"}, Env: env(l)})
	if err != nil {
		t.Fatal(err)
	}
	started := make([]byte, len("started\n"))
	if _, err := io.ReadFull(proc.Stdout(), started); err != nil {
		t.Fatalf("reading stdout: %q, %v", started, err)
	}
	if l.Vanished(t.Context()) {
		t.Error("Vanished before Remove")
	}
	if err := p.Remove(l.ID()); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	st, err := proc.Wait()
	if !errors.Is(err, driver.ErrVanished) {
		t.Errorf("Wait after Remove: %+v, %v, want ErrVanished", st, err)
	}
	if rest, err := io.ReadAll(proc.Stdout()); err != nil || len(rest) != 0 {
		t.Errorf("stdout after Remove: %q, %v, want its end", rest, err)
	}
	if !l.Vanished(t.Context()) {
		t.Error("Vanished is false after Remove")
	}
	if _, err := l.Exec(t.Context(), driver.ExecRequest{Path: "echo", Env: env(l)}, 0); !errors.Is(err, driver.ErrVanished) {
		t.Errorf("Exec after Remove: %v, want ErrVanished", err)
	}
	if _, err := l.CopyOut(t.Context(), l.Home()); !errors.Is(err, driver.ErrVanished) {
		t.Errorf("CopyOut after Remove: %v, want ErrVanished", err)
	}
	if err := p.Remove(l.ID()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second Remove: %v, want fs.ErrNotExist", err)
	}
	if p.Live() != 1 {
		t.Errorf("Live %d before Close, want 1", p.Live())
	}
	if err := l.Close(context.Background()); err != nil {
		t.Errorf("Close of a vanished sandbox: %v", err)
	}
	if p.Live() != 0 {
		t.Errorf("Live %d after Close", p.Live())
	}
}

// TestSignalStatus checks the statuses of signalled programs, including
// one that ignores Terminate until killed.
func TestSignalStatus(t *testing.T) {
	stubborn := make(chan struct{})
	p := memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{
		"stubborn": func(ctx context.Context, p *memsandbox.Proc) int {
			io.WriteString(p.Stdout, "started\n")
			<-ctx.Done()
			<-stubborn // traps SIGTERM: keeps running
			return 0
		},
	}})
	t.Cleanup(func() { close(stubborn) })
	l := acquire(t, p)
	for _, tc := range []struct {
		prog string
		sigs []driver.Signal
		want harness.ExitStatus
	}{
		{"sleep", []driver.Signal{driver.Terminate}, harness.ExitStatus{Code: -1, Signal: "terminated"}},
		{"sleep", []driver.Signal{driver.Kill}, harness.ExitStatus{Code: -1, Signal: "killed"}},
		{"stubborn", []driver.Signal{driver.Terminate, driver.Kill}, harness.ExitStatus{Code: -1, Signal: "killed"}},
	} {
		proc, err := l.Start(t.Context(), driver.ExecRequest{Path: tc.prog, Args: []string{"3600"}, Env: env(l)})
		if err != nil {
			t.Fatal(err)
		}
		line := make([]byte, len("started\n"))
		if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
			t.Fatal(err)
		}
		for _, s := range tc.sigs {
			proc.Signal(s)
		}
		st, err := proc.Wait()
		if err != nil {
			t.Errorf("%s: Wait: %v", tc.prog, err)
		}
		if diff := cmp.Diff(tc.want, st); diff != "" {
			t.Errorf("%s after %v (-want +got):\n%s", tc.prog, tc.sigs, diff)
		}
		proc.Close()
	}
}

// TestBuffered checks that a process may exit before its small output is
// read, as with real pipes.
func TestBuffered(t *testing.T) {
	l := acquire(t, memsandbox.New(nil))
	proc, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/echo", Args: []string{"buffered"}, Env: env(l)})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := proc.Wait(); err != nil || !st.Success() {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	b, err := io.ReadAll(proc.Stdout())
	if err != nil || string(b) != "buffered\n" {
		t.Errorf("stdout after exit: %q, %v", b, err)
	}
}

func TestProgramTable(t *testing.T) {
	p := memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{
		"echo": nil,
		"/opt/agent/bin/agent": func(_ context.Context, p *memsandbox.Proc) int {
			io.WriteString(p.Stdout, "agent "+strings.Join(p.Args, ","))
			return 3
		},
		"panics": func(context.Context, *memsandbox.Proc) int { panic("boom") },
	}})
	l := acquire(t, p)
	if _, err := l.LookPath(t.Context(), "echo"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("LookPath of a removed program: %v", err)
	}
	if got, err := l.LookPath(t.Context(), "/opt/agent/bin/agent"); err != nil || got != "/opt/agent/bin/agent" {
		t.Errorf("LookPath of an absolute program: %q, %v", got, err)
	}
	if _, err := l.LookPath(t.Context(), "agent"); err == nil {
		t.Error("an absolute program is found by its base name")
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/opt/agent/bin/agent", Args: []string{"a", "b"}, Env: env(l)}, 0)
	if err != nil || string(res.Stdout) != "agent a,b" || res.Status.Code != 3 {
		t.Errorf("agent: %q, %+v, %v", res.Stdout, res.Status, err)
	}
	res, err = l.Exec(t.Context(), driver.ExecRequest{Path: "panics", Env: env(l)}, 0)
	if err != nil || res.Status.Code != 2 || !bytes.Contains(res.Stderr, []byte("panic: boom")) {
		t.Errorf("panicking program: %+v, stderr %q, %v", res.Status, res.Stderr, err)
	}
	if _, err := l.Start(t.Context(), driver.ExecRequest{Path: "echo", Env: env(l)}); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Start of a removed program: %v, want exec.ErrNotFound", err)
	}
}

// TestGroup checks that the streams stay open while a background member
// runs, and that Terminate reaches it after the program's exit.
func TestGroup(t *testing.T) {
	release := make(chan struct{})
	p := memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{
		"daemon": func(_ context.Context, p *memsandbox.Proc) int {
			p.Go(func(ctx context.Context) {
				<-release
				io.WriteString(p.Stdout, "from the child\n")
				<-ctx.Done()
			})
			io.WriteString(p.Stdout, "parent done\n")
			return 0
		},
	}})
	l := acquire(t, p)
	proc, err := l.Start(t.Context(), driver.ExecRequest{Path: "daemon", Env: env(l)})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := proc.Wait(); err != nil || !st.Success() {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	close(release)
	out := make([]byte, len("parent done\nfrom the child\n"))
	if _, err := io.ReadFull(proc.Stdout(), out); err != nil {
		t.Fatalf("reading: %q, %v", out, err)
	}
	proc.Signal(driver.Terminate)
	if rest, err := io.ReadAll(proc.Stdout()); err != nil || len(rest) != 0 {
		t.Errorf("after Terminate: %q, %v", rest, err)
	}
	if st, _ := proc.Wait(); !st.Success() {
		t.Errorf("status changed by a signal after exit: %+v", st)
	}
}

func TestFS(t *testing.T) {
	l := acquire(t, memsandbox.New(nil))
	f := l.Sandbox().(*memsandbox.Sandbox).FS()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.MkdirAll("/a/b/c", 0o750))
	must(f.WriteFile("/a/b/c/f", []byte("one"), 0o600))
	must(f.Symlink("b/c", "/a/link"))
	must(f.Symlink("/a", "/abs"))
	for _, name := range []string{"/a/link/f", "/abs/link/f", "/a/b/../b/c/f", "/abs/link/../c/f"} {
		b, err := f.ReadFile(name)
		if err != nil || string(b) != "one" {
			t.Errorf("ReadFile(%s) = %q, %v", name, b, err)
		}
	}
	must(f.WriteFile("/a/link/f", []byte("two"), 0o644))
	if fi, err := f.Stat("/a/b/c/f"); err != nil || fi.Mode() != 0o600 || fi.Size() != 3 {
		t.Errorf("Stat after rewrite: %v, %v (an existing file keeps its mode)", fi, err)
	}
	if fi, err := f.Lstat("/a/link"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat of a link: %v, %v", fi, err)
	}
	if _, err := f.ReadFile("/missing/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
	if err := f.WriteFile("/missing/f", nil, 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteFile in a missing directory: %v", err)
	}
	if err := f.Symlink("x", "/a/link"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Symlink over an existing name: %v", err)
	}
	if err := f.Remove("/a/b"); err == nil {
		t.Error("Remove of a non-empty directory succeeded")
	}
	must(f.Symlink("loop2", "/loop1"))
	must(f.Symlink("loop1", "/loop2"))
	if _, err := f.ReadFile("/loop1"); err == nil {
		t.Error("reading through a link loop succeeded")
	}
	des, err := f.ReadDir("/a")
	must(err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if diff := cmp.Diff([]string{"b", "link"}, names); diff != "" {
		t.Errorf("ReadDir (-want +got):\n%s", diff)
	}
	must(f.Remove("/a/link"))
	if _, err := f.Lstat("/a/link"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat after Remove: %v", err)
	}
	l.Close(context.Background())
	if _, err := f.ReadFile("/a/b/c/f"); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("ReadFile after Close: %v, want sandbox.ErrClosed", err)
	}
}

// TestCopyInConfined checks that CopyIn resolves links already in the
// sandbox inside the destination only: a link to a directory inside is
// followed, one leading outside is refused.
func TestCopyInConfined(t *testing.T) {
	l := acquire(t, memsandbox.New(nil))
	f := l.Sandbox().(*memsandbox.Sandbox).FS()
	home := l.Home()
	for _, err := range []error{
		f.MkdirAll(home+"/dest/real", 0o700),
		f.MkdirAll("/outside", 0o755),
		f.Symlink("real", home+"/dest/inside"),
		f.Symlink("/outside", home+"/dest/abs"),
		f.Symlink("../../..", home+"/dest/up"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sandboxtest.WriteFiles(t.Context(), l, home+"/dest", []tarsafe.File{{Name: "inside/x", Data: []byte("ok")}}); err != nil {
		t.Errorf("writing through a link inside: %v", err)
	}
	if b, err := f.ReadFile(home + "/dest/real/x"); err != nil || string(b) != "ok" {
		t.Errorf("the file written through a link inside: %q, %v", b, err)
	}
	for _, name := range []string{"abs/x", "up/x"} {
		err := sandboxtest.WriteFiles(t.Context(), l, home+"/dest", []tarsafe.File{{Name: name, Data: []byte("escaped")}})
		if !errors.Is(err, tarsafe.ErrUnsafe) {
			t.Errorf("writing %s: %v, want tarsafe.ErrUnsafe", name, err)
		}
	}
	for _, p := range []string{"/outside/x", "/x"} {
		if _, err := f.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists: %v", p, err)
		}
	}
	// A hard link inside shares its file.
	if err := l.CopyIn(t.Context(), home+"/dest", tarWith(t, "real/x", "hard")); err != nil {
		t.Fatalf("hard link: %v", err)
	}
	if err := f.WriteFile(home+"/dest/real/x", []byte("changed"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := f.ReadFile(home + "/dest/hard"); string(b) != "changed" {
		t.Errorf("hard link reads %q after its file changed", b)
	}
}

// tarWith returns a tar stream with a hard link name -> target.
func tarWith(t *testing.T, target, name string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Typeflag: tar.TypeLink, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}
