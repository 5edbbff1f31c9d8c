package sandboxtest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
)

// Harness adapts a provider to the suite.
type Harness struct {
	// NewProvider returns the provider under test. It is called once per
	// subtest, so subtests share no provider state; it may use t.Cleanup
	// and t.TempDir.
	NewProvider func(t *testing.T) driver.Provider
	// Command returns the request that runs program p with args in a
	// sandbox: Path and Args only, the suite sets Env, Dir and Stdin. Nil
	// means Shell.
	Command func(p Program, args ...string) driver.ExecRequest
	// Options returns the options of each lease. Nil means a Workdir made
	// with t.TempDir and no labels.
	Options func(t *testing.T) driver.Options
	// Vanish removes the lease's sandbox behind outpost's back (a
	// container deleted by someone else), for providers that report it
	// (driver.Vanisher). Nil: the suite checks only that a live sandbox
	// has not vanished.
	Vanish func(t *testing.T, l *sandbox.Lease)
}

// RunConformanceTests runs the provider conformance suite as subtests of
// t, one at a time. t may be a parallel test: suites of several providers
// (or modes) can run beside each other.
func RunConformanceTests(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	tests := []struct {
		name string
		f    func(*testing.T)
	}{
		{"AcquireClose", s.testAcquireClose},
		{"UseAfterClose", s.testUseAfterClose},
		{"AcquireCancelled", s.testAcquireCancelled},
		{"Paths", s.testPaths},
		{"DistinctHomes", s.testDistinctHomes},
		{"Environment", s.testEnvironment},
		{"EnvironmentIsolation", s.testEnvironmentIsolation},
		{"Stdio", s.testStdio},
		{"ExitStatus", s.testExitStatus},
		{"WorkingDirectory", s.testWorkingDirectory},
		{"Signal", s.testSignal},
		{"SignalAfterExit", s.testSignalAfterExit},
		{"Stdin", s.testStdin},
		{"NoStdin", s.testNoStdin},
		{"LargeOutput", s.testLargeOutput},
		{"LongLine", s.testLongLine},
		{"ExecLimit", s.testExecLimit},
		{"ExecCancel", s.testExecCancel},
		{"ConcurrentStart", s.testConcurrentStart},
		{"ProcessGroupKill", s.testProcessGroupKill},
		{"ExecReapsGroup", s.testExecReapsGroup},
		{"CloseStopsProcesses", s.testCloseStopsProcesses},
		{"LookPath", s.testLookPath},
		{"CopyRoundTrip", s.testCopyRoundTrip},
		{"CopyOutSingle", s.testCopyOutSingle},
		{"CopyOutMissing", s.testCopyOutMissing},
		{"CopyInReplaces", s.testCopyInReplaces},
		{"CopyInUnsafe", s.testCopyInUnsafe},
		{"CopyInSymlinkChain", s.testCopyInSymlinkChain},
		{"CopyInDropsSetuid", s.testCopyInDropsSetuid},
		{"FilesSharedWithProcesses", s.testFilesShared},
		{"WorkspaceSnapshot", s.testWorkspaceSnapshot},
		{"List", s.testList},
		{"HostPath", s.testHostPath},
		{"Warm", s.testWarm},
		{"Vanished", s.testVanished},
		{"Degraded", s.testDegraded},
		{"Collect", s.testCollect},
		{"Tunnel", s.testTunnel},
		{"TunnelEndsWithLease", s.testTunnelEndsWithLease},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.f)
	}
}

type suite struct {
	h Harness
	// mustTunnel: a sandbox that is no driver.Tunneler fails the tunnel
	// tests (RunTunnelTests) rather than skipping them.
	mustTunnel bool
}

// newSuite checks h and fills in its defaults.
func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	if h.NewProvider == nil {
		t.Fatal("sandboxtest: Harness.NewProvider is nil")
	}
	if h.Command == nil {
		h.Command = Shell
	}
	if h.Options == nil {
		h.Options = func(t *testing.T) driver.Options { return driver.Options{Workdir: t.TempDir()} }
	}
	return &suite{h: h}
}

// RunTunnelTests runs only the suite's driver.Tunneler tests (also part
// of RunConformanceTests, which skips them for a provider without
// tunnels), for a provider's own tests of its tunnel: there, a sandbox
// that is no driver.Tunneler fails them.
func RunTunnelTests(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	s.mustTunnel = true
	t.Run("Tunnel", s.testTunnel)
	t.Run("TunnelEndsWithLease", s.testTunnelEndsWithLease)
}

// provider makes the provider for one subtest.
func (s *suite) provider(t *testing.T) driver.Provider {
	t.Helper()
	p := s.h.NewProvider(t)
	if p == nil {
		t.Fatal("Harness.NewProvider returned nil")
	}
	return p
}

// acquire leases a sandbox from p and releases it when the test ends.
func (s *suite) acquire(t *testing.T, p driver.Provider) *sandbox.Lease {
	t.Helper()
	l, err := sandbox.Acquire(t.Context(), p, s.h.Options(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// lease makes a provider and leases one sandbox from it.
func (s *suite) lease(t *testing.T) *sandbox.Lease {
	t.Helper()
	return s.acquire(t, s.provider(t))
}

// baseEnv is the provider's environment: what every request starts from.
func baseEnv(l *sandbox.Lease) map[string]string {
	env := l.Environment()
	m := make(map[string]string, len(env.Fixed)+len(env.Defaults))
	for k, v := range env.Defaults {
		m[k] = v
	}
	for k, v := range env.Fixed {
		m[k] = v
	}
	return m
}

// req is the request running p with args and the provider's environment.
func (s *suite) req(l *sandbox.Lease, p Program, args ...string) driver.ExecRequest {
	r := s.h.Command(p, args...)
	r.Env = baseEnv(l)
	return r
}

// execLimit bounds what run keeps of each stream: above every output the
// suite produces through Exec.
const execLimit = 32 << 20

// run runs p to completion through Lease.Exec and fails the test on an
// error (not on a non-zero status).
func (s *suite) run(t *testing.T, l *sandbox.Lease, p Program, args ...string) sandbox.ExecResult {
	t.Helper()
	return s.exec(t, l, s.req(l, p, args...))
}

func (s *suite) exec(t *testing.T, l *sandbox.Lease, req driver.ExecRequest) sandbox.ExecResult {
	t.Helper()
	res, err := l.Exec(t.Context(), req, execLimit)
	if err != nil {
		t.Fatalf("Exec %s %q: %v (stdout %q, stderr %q)", req.Path, req.Args, err, trim(res.Stdout), trim(res.Stderr))
	}
	return res
}

// runOK is run, failing the test unless the program exits 0.
func (s *suite) runOK(t *testing.T, l *sandbox.Lease, p Program, args ...string) sandbox.ExecResult {
	t.Helper()
	res := s.run(t, l, p, args...)
	if !res.Status.Success() {
		t.Fatalf("%v %q: status %+v, stderr %q", p, args, res.Status, trim(res.Stderr))
	}
	return res
}

func trim(b []byte) string {
	const max = 512
	if len(b) > max {
		return string(b[:max]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return string(b)
}

// proc is a process started by a test. Its stderr is drained in the
// background; its stdout is read by the test. When the test ends it is
// killed, closed and waited for.
type proc struct {
	t      *testing.T
	p      driver.Process
	out    *bufio.Reader
	errOut chan []byte

	waitOnce sync.Once
	status   harness.ExitStatus
	waitErr  error
}

func (s *suite) start(t *testing.T, l *sandbox.Lease, req driver.ExecRequest) *proc {
	t.Helper()
	p, err := l.Start(t.Context(), req)
	if err != nil {
		t.Fatalf("Start %s %q: %v", req.Path, req.Args, err)
	}
	pr := &proc{t: t, p: p, out: bufio.NewReader(p.Stdout()), errOut: make(chan []byte, 1)}
	go func() {
		b, _ := io.ReadAll(p.Stderr())
		pr.errOut <- b
	}()
	t.Cleanup(func() {
		_ = p.Signal(driver.Kill)
		_ = p.Close()
		pr.wait()
	})
	return pr
}

// line reads one line of stdout, newline included.
func (pr *proc) line() string {
	pr.t.Helper()
	s, err := pr.out.ReadString('\n')
	if err != nil {
		pr.t.Fatalf("reading a line of stdout: got %q, %v", s, err)
	}
	return s
}

// rest reads stdout to its end.
func (pr *proc) rest() []byte {
	pr.t.Helper()
	b, err := io.ReadAll(pr.out)
	if err != nil {
		pr.t.Fatalf("reading stdout: %v", err)
	}
	return b
}

// stderr returns everything the process group wrote on stderr, once the
// stream has ended.
func (pr *proc) stderr() []byte {
	b := <-pr.errOut
	pr.errOut <- b
	return b
}

func (pr *proc) wait() (harness.ExitStatus, error) {
	pr.waitOnce.Do(func() { pr.status, pr.waitErr = pr.p.Wait() })
	return pr.status, pr.waitErr
}

// mustWait waits and fails the test on a Wait error.
func (pr *proc) mustWait() harness.ExitStatus {
	pr.t.Helper()
	st, err := pr.wait()
	if err != nil {
		pr.t.Fatalf("Wait: %v", err)
	}
	return st
}

func (s *suite) testAcquireClose(t *testing.T) {
	p := s.provider(t)
	if p.Name() == "" {
		t.Error("Provider.Name is empty")
	}
	l, err := sandbox.Acquire(t.Context(), p, s.h.Options(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if l.ID() == "" {
		t.Error("ID is empty")
	}
	if l.Provider() != p {
		t.Error("Provider() is not the provider the lease came from")
	}
	if diff := cmp.Diff(p.Capabilities(), l.Capabilities()); diff != "" {
		t.Errorf("lease capabilities differ from the provider's (-provider +lease):\n%s", diff)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}

func (s *suite) testUseAfterClose(t *testing.T) {
	l, err := sandbox.Acquire(t.Context(), s.provider(t), s.h.Options(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	home := l.Home()
	echo := s.req(l, Echo, "hi")
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	var tarball bytes.Buffer
	if err := tarsafe.Write(&tarball, []tarsafe.File{{Name: "f", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Start", func() error {
			p, err := l.Start(ctx, echo)
			if err == nil {
				p.Signal(driver.Kill)
				p.Close()
				p.Wait()
			}
			return err
		}},
		{"Exec", func() error { _, err := l.Exec(ctx, echo, 0); return err }},
		{"CopyIn", func() error { return l.CopyIn(ctx, home, bytes.NewReader(tarball.Bytes())) }},
		{"WriteFiles", func() error {
			return WriteFiles(ctx, l, home, []tarsafe.File{{Name: "f", Data: []byte("x")}})
		}},
		{"CopyOut", func() error {
			rc, err := l.CopyOut(ctx, home)
			if err == nil {
				rc.Close()
			}
			return err
		}},
		{"LookPath", func() error { _, err := l.LookPath(ctx, path.Base(echo.Path)); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("%s after Close: %v, want an error wrapping sandbox.ErrClosed", c.name, err)
		}
	}
}

func (s *suite) testAcquireCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l, err := sandbox.Acquire(ctx, s.provider(t), s.h.Options(t))
	if err == nil {
		l.Close(context.Background())
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a cancelled context: %v, want an error wrapping context.Canceled", err)
	}
}

func (s *suite) testPaths(t *testing.T) {
	l := s.lease(t)
	if !path.IsAbs(l.Home()) {
		t.Errorf("Home %q is not absolute", l.Home())
	}
	if !path.IsAbs(l.Workdir()) {
		t.Errorf("Workdir %q is not absolute", l.Workdir())
	}
}

// testDistinctHomes checks that two leases share no home: a file written
// in one is not in the other (whether their paths differ, as on the host,
// or are the same path in separate sandboxes).
func (s *suite) testDistinctHomes(t *testing.T) {
	p := s.provider(t)
	a, b := s.acquire(t, p), s.acquire(t, p)
	if a.ID() == b.ID() {
		t.Errorf("two leases have the same ID %q", a.ID())
	}
	if err := WriteFiles(t.Context(), a, a.Home(), []tarsafe.File{{Name: "only-in-a", Data: []byte("a")}}); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	rc, err := b.CopyOut(t.Context(), path.Join(b.Home(), "only-in-a"))
	if err == nil {
		rc.Close()
		t.Fatalf("a file written in one lease's home (%s) is in the other's (%s)", a.Home(), b.Home())
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CopyOut of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func (s *suite) testEnvironment(t *testing.T) {
	l := s.lease(t)
	env := l.Environment()
	if got := env.Fixed["HOME"]; got != l.Home() {
		t.Errorf("Environment().Fixed[HOME] = %q, want Home() %q", got, l.Home())
	}
	fixed := make([]string, 0, len(env.Fixed))
	for k := range env.Fixed {
		fixed = append(fixed, k)
		if _, ok := env.Defaults[k]; ok {
			t.Errorf("%s is both fixed and a default", k)
		}
	}
	sort.Strings(fixed)
	caps := slices.Clone(l.Capabilities().FixedEnv)
	sort.Strings(caps)
	if diff := cmp.Diff(caps, fixed); diff != "" {
		t.Errorf("Capabilities().FixedEnv and the names of Environment().Fixed differ (-caps +fixed):\n%s", diff)
	}
	if env.Defaults["PATH"] == "" {
		t.Error("Environment().Defaults has no PATH")
	}
	if got := string(s.runOK(t, l, Env, "HOME").Stdout); got != l.Home()+"\n" {
		t.Errorf("a process sees HOME=%q, want %q", strings.TrimSuffix(got, "\n"), l.Home())
	}
}

// testEnvironmentIsolation checks that a process sees the environment it is
// given and nothing of the host's.
func (s *suite) testEnvironmentIsolation(t *testing.T) {
	const name = "OUTPOST_SANDBOXTEST_SECRET"
	hostVar(t, name, "host-value")
	l := s.lease(t) // made after hostVar: a provider reading the host env sees it
	env := l.Environment()
	if _, ok := env.Fixed[name]; ok {
		t.Errorf("Environment().Fixed has the host's %s", name)
	}
	if _, ok := env.Defaults[name]; ok {
		t.Errorf("Environment().Defaults has the host's %s", name)
	}
	if got := string(s.runOK(t, l, Env, name).Stdout); got != "\n" {
		t.Errorf("a process not given %s sees %q", name, got)
	}
	req := s.req(l, Env, name)
	req.Env[name] = "given"
	res := s.exec(t, l, req)
	if got := string(res.Stdout); got != "given\n" {
		t.Errorf("a process given %s=given sees %q", name, got)
	}
	req = s.req(l, Env, "OUTPOST_SANDBOXTEST_EXTRA")
	req.Env["OUTPOST_SANDBOXTEST_EXTRA"] = "a value with spaces = and $dollars"
	if got := string(s.exec(t, l, req).Stdout); got != "a value with spaces = and $dollars\n" {
		t.Errorf("a variable's value arrives as %q", got)
	}
}

func (s *suite) testStdio(t *testing.T) {
	l := s.lease(t)
	res := s.runOK(t, l, Echo, "hello", "world")
	if diff := cmp.Diff("hello world\n", string(res.Stdout)); diff != "" {
		t.Errorf("Echo stdout (-want +got):\n%s", diff)
	}
	if len(res.Stderr) != 0 {
		t.Errorf("Echo wrote %q on stderr", res.Stderr)
	}
	res = s.runOK(t, l, Stderr, "to", "stderr")
	if diff := cmp.Diff("to stderr\n", string(res.Stderr)); diff != "" {
		t.Errorf("Stderr stderr (-want +got):\n%s", diff)
	}
	if len(res.Stdout) != 0 {
		t.Errorf("Stderr wrote %q on stdout", res.Stdout)
	}
}

func (s *suite) testExitStatus(t *testing.T) {
	l := s.lease(t)
	for _, code := range []int{0, 1, 42} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			res, err := l.Exec(t.Context(), s.req(l, Exit, strconv.Itoa(code)), 0)
			if err != nil {
				t.Fatalf("Exec: %v (a non-zero exit is a value, not an error)", err)
			}
			if diff := cmp.Diff(harness.ExitStatus{Code: code}, res.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func (s *suite) testWorkingDirectory(t *testing.T) {
	l := s.lease(t)
	if got := string(s.runOK(t, l, Pwd).Stdout); got != l.Workdir()+"\n" {
		t.Errorf("default working directory %q, want Workdir() %q", strings.TrimSuffix(got, "\n"), l.Workdir())
	}
	req := s.req(l, Pwd)
	req.Dir = l.Home()
	res := s.exec(t, l, req)
	if got := string(res.Stdout); got != l.Home()+"\n" {
		t.Errorf("working directory with Dir=Home() is %q, want %q", strings.TrimSuffix(got, "\n"), l.Home())
	}
}

func (s *suite) testSignal(t *testing.T) {
	l := s.lease(t)
	for _, tc := range []struct {
		name string
		sig  driver.Signal
	}{{"Terminate", driver.Terminate}, {"Kill", driver.Kill}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := s.start(t, l, s.req(l, Sleep, "3600"))
			if got := pr.line(); got != "started\n" {
				t.Fatalf("Sleep's first line %q, want %q", got, "started\n")
			}
			if err := pr.p.Signal(tc.sig); err != nil {
				t.Fatalf("Signal: %v", err)
			}
			st := pr.mustWait()
			if st.Success() {
				t.Errorf("a signalled Sleep reports success: %+v", st)
			}
			if st.Code == 0 && st.Signal == "" {
				t.Errorf("status %+v reports neither a signal nor a non-zero code", st)
			}
			if rest := pr.rest(); len(rest) != 0 {
				t.Errorf("unexpected output after started: %q", rest)
			}
		})
	}
}

func (s *suite) testSignalAfterExit(t *testing.T) {
	l := s.lease(t)
	pr := s.start(t, l, s.req(l, Echo, "done"))
	if got := string(pr.rest()); got != "done\n" {
		t.Errorf("stdout %q", got)
	}
	if st := pr.mustWait(); !st.Success() {
		t.Fatalf("status %+v", st)
	}
	for _, sig := range []driver.Signal{driver.Terminate, driver.Kill} {
		if err := pr.p.Signal(sig); err != nil {
			t.Errorf("Signal(%d) after exit: %v, want nil", sig, err)
		}
	}
}

func (s *suite) testStdin(t *testing.T) {
	l := s.lease(t)
	if !l.Capabilities().Stdin {
		t.Skip("provider lacks Capabilities.Stdin")
	}
	req := s.req(l, Cat)
	req.Stdin = true
	pr := s.start(t, l, req)
	w := pr.p.Stdin()
	if w == nil {
		t.Fatal("Stdin() is nil for a request with Stdin")
	}
	var data bytes.Buffer
	for i := 0; data.Len() < 1<<20; i++ {
		fmt.Fprintf(&data, "line %d of the standard input\n", i)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := w.Write(data.Bytes())
		werr <- errors.Join(err, w.Close())
	}()
	got := pr.rest()
	if err := <-werr; err != nil {
		t.Errorf("writing stdin: %v", err)
	}
	if !bytes.Equal(got, data.Bytes()) {
		t.Errorf("Cat echoed %d bytes, want the %d written", len(got), data.Len())
	}
	if st := pr.mustWait(); !st.Success() {
		t.Errorf("status %+v, stderr %q", st, pr.stderr())
	}
}

func (s *suite) testNoStdin(t *testing.T) {
	l := s.lease(t)
	pr := s.start(t, l, s.req(l, Cat))
	if w := pr.p.Stdin(); w != nil {
		t.Error("Stdin() is not nil for a request without Stdin")
	}
	if got := pr.rest(); len(got) != 0 {
		t.Errorf("Cat without stdin printed %q", got)
	}
	if st := pr.mustWait(); !st.Success() {
		t.Errorf("Cat without stdin: status %+v, stderr %q (stdin should read as empty)", st, pr.stderr())
	}
}

// checkBig checks that b is n bytes 'x' and a newline.
func checkBig(t *testing.T, b []byte, n int) {
	t.Helper()
	if len(b) != n+1 {
		t.Fatalf("got %d bytes, want %d", len(b), n+1)
	}
	if i := bytes.IndexFunc(b[:n], func(r rune) bool { return r != 'x' }); i >= 0 {
		t.Fatalf("byte %d is %q, want 'x'", i, b[i])
	}
	if b[n] != '\n' {
		t.Fatalf("last byte %q, want a newline", b[n])
	}
}

// testLargeOutput reads a few MiB of stdout in small reads as it streams.
func (s *suite) testLargeOutput(t *testing.T) {
	l := s.lease(t)
	const n = 3 << 20
	pr := s.start(t, l, s.req(l, Big, strconv.Itoa(n)))
	var got bytes.Buffer
	buf := make([]byte, 1024)
	for {
		k, err := pr.out.Read(buf)
		got.Write(buf[:k])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", got.Len(), err)
		}
	}
	checkBig(t, got.Bytes(), n)
	if st := pr.mustWait(); !st.Success() {
		t.Errorf("status %+v, stderr %q", st, pr.stderr())
	}
}

// testLongLine checks that a line of 8 MiB arrives intact through Exec.
func (s *suite) testLongLine(t *testing.T) {
	l := s.lease(t)
	const n = 8 << 20
	res := s.runOK(t, l, Big, strconv.Itoa(n))
	checkBig(t, res.Stdout, n)
}

// testExecLimit checks that Exec keeps limit bytes and never blocks the
// process on the rest.
func (s *suite) testExecLimit(t *testing.T) {
	l := s.lease(t)
	const limit = 1 << 20
	res, err := l.Exec(t.Context(), s.req(l, Big, strconv.Itoa(3<<20)), limit)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !res.Status.Success() {
		t.Fatalf("status %+v", res.Status)
	}
	if len(res.Stdout) != limit {
		t.Errorf("kept %d bytes of stdout, want the limit %d", len(res.Stdout), limit)
	}
}

// startHook wraps a provider so that a hook runs right after each process
// has started: the suite's way to act at a known point without sleeping.
type startHook struct {
	driver.Provider
	after func()
}

func (h startHook) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	sb, err := h.Provider.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return hookedSandbox{Sandbox: sb, after: h.after}, nil
}

type hookedSandbox struct {
	driver.Sandbox
	after func()
}

func (s hookedSandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	p, err := s.Sandbox.Start(ctx, req)
	if err == nil {
		s.after()
	}
	return p, err
}

// testExecCancel cancels Exec's context once the process runs: the process
// must be stopped and Exec return the context's error.
func (s *suite) testExecCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l := s.acquire(t, startHook{Provider: s.provider(t), after: cancel})
	res, err := l.Exec(ctx, s.req(l, Sleep, "3600"), 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Exec cancelled while running: %v, want context.Canceled", err)
	}
	if res.Status.Success() {
		t.Errorf("a cancelled Sleep reports success: %+v", res.Status)
	}
}

// testConcurrentStart runs several processes on one lease at once.
func (s *suite) testConcurrentStart(t *testing.T) {
	l := s.lease(t)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("process %d", i)
			res, err := l.Exec(t.Context(), s.req(l, Echo, want), 0)
			if err != nil {
				t.Errorf("process %d: %v", i, err)
				return
			}
			if got := string(res.Stdout); got != want+"\n" || !res.Status.Success() {
				t.Errorf("process %d: stdout %q, status %+v, stderr %q", i, got, res.Status, trim(res.Stderr))
			}
		}()
	}
	wg.Wait()
}

// testProcessGroupKill checks that Kill reaches a background child left
// running by a process that has exited: the child holds stdout open, so
// stdout ends only once nothing of the group is alive.
func (s *suite) testProcessGroupKill(t *testing.T) {
	l := s.lease(t)
	pr := s.start(t, l, s.req(l, Spawn))
	if child := strings.TrimSpace(pr.line()); child == "" {
		t.Error("Spawn named no child")
	}
	if st := pr.mustWait(); !st.Success() {
		t.Fatalf("Spawn's parent: status %+v, stderr %q", st, pr.stderr())
	}
	if err := pr.p.Signal(driver.Kill); err != nil {
		t.Fatalf("Signal(Kill) after the parent's exit: %v", err)
	}
	// Blocks until the child is gone; a hang here is a group left alive.
	if rest := pr.rest(); len(rest) != 0 {
		t.Errorf("unexpected output: %q", rest)
	}
	pr.stderr()
}

// testExecReapsGroup checks that Exec returns once its process exited,
// though a background child it left in its group holds stdout open: the
// portable layer kills what is left of the group (Job.Wait), so nothing an
// Exec starts outlives it. A hang here is a group left alive.
func (s *suite) testExecReapsGroup(t *testing.T) {
	l := s.lease(t)
	res, err := l.Exec(t.Context(), s.req(l, Spawn), 0)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !res.Status.Success() {
		t.Errorf("Spawn's parent: status %+v, stderr %q", res.Status, trim(res.Stderr))
	}
	if child := strings.TrimSpace(string(res.Stdout)); child == "" {
		t.Error("Spawn named no child")
	}
}

// closeGrace bounds how long testCloseStopsProcesses waits for a process to
// end after its lease was released: a guard against hanging the test run,
// not a timing assertion.
const closeGrace = 30 * time.Second

// testCloseStopsProcesses releases a lease whose process is still running
// and was never waited for: Close must stop it. The context given to Close
// has ended, as it has when a turn's release deadline passes while the
// lease waits for its processes; the provider must release everything
// anyway.
func (s *suite) testCloseStopsProcesses(t *testing.T) {
	l := s.lease(t)
	pr := s.start(t, l, s.req(l, Sleep, "3600"))
	if got := pr.line(); got != "started\n" {
		t.Fatalf("Sleep's first line %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Close(ctx); err != nil {
		t.Errorf("Close with running processes and an ended context: %v", err)
	}
	waited := make(chan struct{})
	go func() {
		pr.wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(closeGrace):
		t.Fatalf("a process is still running %v after its lease was closed", closeGrace)
	}
	if st, _ := pr.wait(); st.Success() {
		t.Errorf("a process stopped by Close reports success: %+v", st)
	}
	pr.rest()
}

func (s *suite) testLookPath(t *testing.T) {
	l := s.lease(t)
	req := s.req(l, Echo, "found")
	name := path.Base(req.Path)
	got, err := l.LookPath(t.Context(), name)
	if err != nil {
		t.Fatalf("LookPath(%q): %v", name, err)
	}
	if !path.IsAbs(got) || path.Base(got) != name {
		t.Errorf("LookPath(%q) = %q, want an absolute path ending in /%s", name, got, name)
	}
	req.Path = got
	if res := s.exec(t, l, req); string(res.Stdout) != "found\n" {
		t.Errorf("running what LookPath found: stdout %q, status %+v, stderr %q", res.Stdout, res.Status, trim(res.Stderr))
	}
	if got, err := l.LookPath(t.Context(), "outpost-sandboxtest-no-such-program"); err == nil {
		t.Errorf("LookPath of a missing program = %q, want an error", got)
	}
}

// readTree reads a CopyOut stream into sorted entries, links without modes
// and empty files without data, for comparison.
func readTree(t *testing.T, rc io.ReadCloser) []tarsafe.File {
	t.Helper()
	defer rc.Close()
	files, err := tarsafe.Read(rc, 64<<20)
	if err != nil {
		t.Fatalf("reading CopyOut's stream: %v", err)
	}
	for i := range files {
		if files[i].Link != "" {
			files[i].Mode = 0
		}
		if len(files[i].Data) == 0 {
			files[i].Data = nil
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files
}

func (s *suite) copyOut(t *testing.T, l *sandbox.Lease, p string) []tarsafe.File {
	t.Helper()
	rc, err := l.CopyOut(t.Context(), p)
	if err != nil {
		t.Fatalf("CopyOut(%s): %v", p, err)
	}
	return readTree(t, rc)
}

func (s *suite) testCopyRoundTrip(t *testing.T) {
	l := s.lease(t)
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	want := []tarsafe.File{
		{Name: "tree", Dir: true, Mode: 0o755},
		{Name: "tree/a.txt", Mode: 0o644, Data: []byte("alpha\n")},
		{Name: "tree/empty", Mode: 0o600},
		{Name: "tree/link", Link: "sub/run.sh"},
		{Name: "tree/sub", Dir: true, Mode: 0o750},
		{Name: "tree/sub/deeper", Dir: true, Mode: 0o700},
		{Name: "tree/sub/deeper/c.bin", Mode: 0o600, Data: bin},
		{Name: "tree/sub/run.sh", Mode: 0o755, Data: []byte("#!/bin/sh\necho hi\n")},
		{Name: "tree/sub/up", Link: "../a.txt"},
	}
	dest := path.Join(l.Home(), "roundtrip", "nested") // missing: CopyIn creates it
	if err := WriteFiles(t.Context(), l, dest, want); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	got := s.copyOut(t, l, path.Join(dest, "tree"))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CopyOut after CopyIn (-want +got):\n%s", diff)
	}
	if got := string(s.runOK(t, l, Mode, path.Join(dest, "tree/sub/run.sh")).Stdout); got != "755\n" {
		t.Errorf("mode of an executable copied in, seen by a process: %q, want 755", got)
	}
}

// testCopyOutSingle copies out a file and a symbolic link: one entry
// each, named by the base name, the link stored as a link.
func (s *suite) testCopyOutSingle(t *testing.T) {
	l := s.lease(t)
	dir := path.Join(l.Home(), "single")
	if err := WriteFiles(t.Context(), l, dir, []tarsafe.File{
		{Name: "f.txt", Mode: 0o640, Data: []byte("content")},
		{Name: "l", Link: "f.txt"},
	}); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	if diff := cmp.Diff([]tarsafe.File{{Name: "f.txt", Mode: 0o640, Data: []byte("content")}}, s.copyOut(t, l, path.Join(dir, "f.txt"))); diff != "" {
		t.Errorf("CopyOut of a file (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]tarsafe.File{{Name: "l", Link: "f.txt"}}, s.copyOut(t, l, path.Join(dir, "l"))); diff != "" {
		t.Errorf("CopyOut of a symbolic link (-want +got):\n%s", diff)
	}
}

func (s *suite) testCopyOutMissing(t *testing.T) {
	l := s.lease(t)
	for _, p := range []string{
		path.Join(l.Home(), "missing"),
		path.Join(l.Home(), "missing", "deeper"),
		"/outpost-sandboxtest-missing/x",
	} {
		rc, err := l.CopyOut(t.Context(), p)
		if err == nil {
			rc.Close()
			t.Errorf("CopyOut(%s) succeeded", p)
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("CopyOut(%s): %v, want an error satisfying errors.Is(err, fs.ErrNotExist)", p, err)
		}
	}
}

// testCopyInReplaces copies over existing files: contents and modes are
// replaced, and a symbolic link at a file's name is replaced, not followed.
func (s *suite) testCopyInReplaces(t *testing.T) {
	l := s.lease(t)
	dir := path.Join(l.Home(), "replace")
	write := func(files ...tarsafe.File) {
		t.Helper()
		if err := WriteFiles(t.Context(), l, dir, files); err != nil {
			t.Fatalf("WriteFiles: %v", err)
		}
	}
	write(tarsafe.File{Name: "a.txt", Mode: 0o600, Data: []byte("first version, longer")},
		tarsafe.File{Name: "target", Mode: 0o600, Data: []byte("target")},
		tarsafe.File{Name: "l", Link: "target"})
	write(tarsafe.File{Name: "a.txt", Mode: 0o644, Data: []byte("second")},
		tarsafe.File{Name: "l", Mode: 0o600, Data: []byte("now a file")})
	want := []tarsafe.File{
		{Name: "replace", Dir: true, Mode: 0o700},
		{Name: "replace/a.txt", Mode: 0o644, Data: []byte("second")},
		{Name: "replace/l", Mode: 0o600, Data: []byte("now a file")},
		{Name: "replace/target", Mode: 0o600, Data: []byte("target")},
	}
	got := s.copyOut(t, l, dir)
	if len(got) > 0 && got[0].Dir {
		got[0].Mode = 0o700 // the mode of a directory CopyIn creates is the provider's
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after copying over existing files (-want +got):\n%s", diff)
	}
}

// hdr is a tar entry for hostile archives.
type hdr struct {
	name, link string
	typ        byte
	data       string
	mode       int64
}

func rawTar(t *testing.T, entries ...hdr) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.data)), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("writing %q: %v", e.name, err)
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, e.data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// notWritten checks that nothing but directories exists under root (which
// may be missing): the archive extracted below it wrote no file or link.
func (s *suite) notWritten(t *testing.T, l *sandbox.Lease, root string) {
	t.Helper()
	rc, err := l.CopyOut(t.Context(), root)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatalf("CopyOut(%s): %v", root, err)
	}
	defer rc.Close()
	files, err := tarsafe.Read(rc, 64<<20)
	if err != nil {
		t.Fatalf("CopyOut(%s) after a refused archive: %v (something unsafe was written)", root, err)
	}
	for _, f := range files {
		if !f.Dir {
			t.Errorf("a refused archive left %s (link %q, %d bytes) under %s", f.Name, f.Link, len(f.Data), root)
		}
	}
}

// testCopyInUnsafe copies hostile archives: each is refused with an error
// wrapping tarsafe.ErrUnsafe and writes nothing, inside or outside.
func (s *suite) testCopyInUnsafe(t *testing.T) {
	l := s.lease(t)
	const absName = "/outpost-sandboxtest-absolute"
	cases := []struct {
		name    string
		entries []hdr
	}{
		{"dotdot", []hdr{{name: "../escape", data: "x"}}},
		{"nested-dotdot", []hdr{{name: "ok/../../escape", data: "x"}}},
		{"absolute", []hdr{{name: absName, data: "x"}}},
		{"symlink-absolute", []hdr{{name: "link", link: "/etc", typ: tar.TypeSymlink}}},
		{"symlink-dotdot", []hdr{{name: "link", link: "../../x", typ: tar.TypeSymlink}}},
		{"symlink-then-write", []hdr{
			{name: "d", link: "..", typ: tar.TypeSymlink},
			{name: "d/x", data: "through the link"},
		}},
		{"hardlink-dotdot", []hdr{{name: "h", link: "../../escape", typ: tar.TypeLink}}},
		{"hardlink-absolute", []hdr{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}},
		{"char-device", []hdr{{name: "null", typ: tar.TypeChar}}},
		{"block-device", []hdr{{name: "disk", typ: tar.TypeBlock}}},
		{"fifo", []hdr{{name: "fifo", typ: tar.TypeFifo}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Escapes of up to three levels land under root, where
			// notWritten looks.
			root := path.Join(l.Home(), "unsafe", tc.name)
			dest := path.Join(root, "a", "b", "dest")
			err := l.CopyIn(t.Context(), dest, bytes.NewReader(rawTar(t, tc.entries...)))
			if !errors.Is(err, tarsafe.ErrUnsafe) {
				t.Errorf("CopyIn: %v, want an error wrapping tarsafe.ErrUnsafe", err)
			}
			s.notWritten(t, l, root)
			rc, err := l.CopyOut(t.Context(), absName)
			if err == nil {
				rc.Close()
				t.Errorf("%s exists after a refused archive", absName)
			}
		})
	}
}

// testCopyInSymlinkChain copies an archive whose links each look harmless
// but together lead outside: "a" -> ".", then "a/b" -> ".." (really
// "b" -> ".."), then a file "a/b/x". It must fail and write nothing outside
// the destination.
func (s *suite) testCopyInSymlinkChain(t *testing.T) {
	l := s.lease(t)
	root := path.Join(l.Home(), "chain")
	dest := path.Join(root, "a", "b", "dest")
	err := l.CopyIn(t.Context(), dest, bytes.NewReader(rawTar(t,
		hdr{name: "a", link: ".", typ: tar.TypeSymlink},
		hdr{name: "a/b", link: "..", typ: tar.TypeSymlink},
		hdr{name: "a/b/x", data: "escaped"},
	)))
	if err == nil {
		t.Error("CopyIn of a chain of links leading outside succeeded")
	}
	rc, err := l.CopyOut(t.Context(), root)
	if errors.Is(err, fs.ErrNotExist) {
		return // refused before anything was written (the archive was checked first)
	}
	if err != nil {
		t.Fatalf("CopyOut: %v", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading CopyOut's stream: %v", err)
		}
		if path.Base(h.Name) == "x" {
			t.Errorf("the file written through the links landed at %s", h.Name)
		}
	}
}

// testCopyInDropsSetuid copies entries with setuid, setgid and sticky bits:
// they are extracted without them.
func (s *suite) testCopyInDropsSetuid(t *testing.T) {
	l := s.lease(t)
	dir := path.Join(l.Home(), "setuid")
	err := l.CopyIn(t.Context(), dir, bytes.NewReader(rawTar(t,
		hdr{name: "suid", data: "#!/bin/sh\n", mode: 0o4755},
		hdr{name: "sgid", data: "#!/bin/sh\n", mode: 0o2755},
		hdr{name: "sticky", typ: tar.TypeDir, mode: 0o1777},
	)))
	if err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	for _, name := range []string{"suid", "sgid"} {
		if got := string(s.runOK(t, l, Mode, path.Join(dir, name)).Stdout); got != "755\n" {
			t.Errorf("mode of %s seen by a process: %q, want 755", name, got)
		}
	}
	if got := string(s.runOK(t, l, Mode, path.Join(dir, "sticky")).Stdout); strings.TrimSpace(got) == "1777" {
		t.Errorf("the sticky bit of a directory survived CopyIn: %q", got)
	}
}

// testFilesShared checks that processes and copies see one filesystem.
func (s *suite) testFilesShared(t *testing.T) {
	l := s.lease(t)
	out := path.Join(l.Home(), "from-process.txt")
	s.runOK(t, l, WriteFile, out, "written by a process")
	if diff := cmp.Diff([]tarsafe.File{{Name: "from-process.txt", Mode: 0o644, Data: []byte("written by a process")}}, s.copyOut(t, l, out), cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".Mode" // the process's umask decides
	}, cmp.Ignore())); diff != "" {
		t.Errorf("CopyOut of a file a process wrote (-want +got):\n%s", diff)
	}
	if err := WriteFiles(t.Context(), l, l.Home(), []tarsafe.File{{Name: "from-copy.txt", Data: []byte("copied in")}}); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	if got := string(s.runOK(t, l, ReadFile, path.Join(l.Home(), "from-copy.txt")).Stdout); got != "copied in" {
		t.Errorf("a process reads %q from a file copied in", got)
	}
}

// hostVars counts the users of each variable hostVar set.
var hostVars = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// hostVar sets the host's variable name to value until the test ends. It is
// t.Setenv for a suite that may run in parallel tests (which t.Setenv
// refuses): suites beside each other share the variable, set while any of
// them needs it. Only the suite's own variables go through it, never one
// another test reads.
func hostVar(t *testing.T, name, value string) {
	t.Helper()
	hostVars.Lock()
	defer hostVars.Unlock()
	if hostVars.n[name] == 0 {
		if err := os.Setenv(name, value); err != nil {
			t.Fatal(err)
		}
	} else if got := os.Getenv(name); got != value {
		t.Fatalf("hostVar: %s is %q for another suite, not %q", name, got, value)
	}
	hostVars.n[name]++
	t.Cleanup(func() {
		hostVars.Lock()
		defer hostVars.Unlock()
		if hostVars.n[name]--; hostVars.n[name] == 0 {
			os.Unsetenv(name)
		}
	})
}
