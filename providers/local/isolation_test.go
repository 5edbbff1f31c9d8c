package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// needBwrap skips (fails under CI) where bubblewrap is not installed or
// refused: the isolated leases need it.
func needBwrap(t *testing.T) {
	t.Helper()
	p := local.New(&local.Options{Isolation: "namespaces"})
	if _, err := p.Isolation(); err != nil {
		testenv.Missing(t, "bubblewrap isolation ("+err.Error()+")", "apt-get install bubblewrap")
	}
}

// shortBase is a lease root short enough for the tunnels' Unix sockets.
func shortBase(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "iso")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// hostile runs script with bash in an isolated lease (egress gateway) and
// returns its output and exit code.
func hostile(t *testing.T, l *sandbox.Lease, script string) (string, int) {
	t.Helper()
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/bash", Args: []string{"-c", script}, Env: env(l)}, 1<<16)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	return string(res.Stdout) + string(res.Stderr), res.Status.Code
}

func isolatedLease(t *testing.T, egress driver.Egress, settings map[string]string) *sandbox.Lease {
	t.Helper()
	needBwrap(t)
	s := map[string]string{"isolation": "namespaces", "root": shortBase(t)}
	for k, v := range settings {
		s[k] = v
	}
	p, err := sandbox.Open("local", s)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir(), Egress: egress})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// TestIsolatedHostileAgent: what an agent told to steal or stay fails at,
// one step each, in an isolated lease with egress gateway.
func TestIsolatedHostileAgent(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(home, ".ssh", "id_rsa")
	if err := os.WriteFile(key, []byte("-----BEGIN FAKE KEY-----"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("OUTPOST_TEST_SECRET", "sk-ant-hostile-test-secret")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host loopback reached") }))
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	l := isolatedLease(t, driver.EgressGateway, nil)
	pid := strconv.Itoa(os.Getpid())

	steps := []struct{ name, script string }{
		{"read ~/.ssh/id_rsa", "cat " + key},
		{"list the user's home", "ls " + home},
		{"see outpost's process", "test -e /proc/" + pid + " && cat /proc/" + pid + "/cmdline"},
		{"read outpost's environ", "cat /proc/" + pid + "/environ"},
		{"find the secret in any environ", "grep -l sk-ant-hostile /proc/*/environ"},
		{"the secret in its own environment", "env | grep sk-ant-hostile"},
		{"connect to the host's loopback", "exec 3<>/dev/tcp/" + strings.Replace(hostPort, ":", "/", 1) + " && echo connected"},
		{"read the docker socket", "test -e /var/run/docker.sock -o -e /run/docker.sock && echo present"},
		{"see other leases", "ls " + filepath.Dir(filepath.Dir(l.Home())) + "/*/owner"},
	}
	for _, s := range steps {
		out, code := hostile(t, l, s.script)
		if code == 0 {
			t.Errorf("%s: succeeded in the isolated lease: %q", s.name, out)
		}
		if strings.Contains(out, "FAKE KEY") || strings.Contains(out, "sk-ant-hostile") || strings.Contains(out, "host loopback reached") {
			t.Errorf("%s: leaked %q", s.name, out)
		}
	}
	// Its own processes only: ps sees the shell, its children and
	// bubblewrap's init.
	out, code := hostile(t, l, "ls /proc | grep -c '^[0-9]'")
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); code != 0 || n > 5 {
		t.Errorf("processes in sight: %q (exit %d), want its own few", out, code)
	}
	// Writable: the workspace and the home; not the system.
	if out, code := hostile(t, l, "echo w > "+l.Workdir()+"/a && echo w > $HOME/b && echo w > /tmp/c && cat "+l.Workdir()+"/a"); code != 0 {
		t.Errorf("writing the workspace, home and /tmp: %q (exit %d)", out, code)
	}
	if out, code := hostile(t, l, "echo w > /usr/outpost-escape"); code == 0 {
		t.Errorf("writing /usr succeeded: %q", out)
	}
}

// TestIsolatedWithoutIsolation proves the steps above can fail: with
// isolation=none the same lease reads the key and reaches the host.
func TestIsolatedWithoutIsolation(t *testing.T) {
	home := t.TempDir()
	key := filepath.Join(home, "id_rsa")
	os.WriteFile(key, []byte("FAKE KEY"), 0o600)
	p, err := sandbox.Open("local", map[string]string{"isolation": "none", "root": shortBase(t)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if out, code := hostile(t, l, "cat "+key+"; test -e /proc/"+strconv.Itoa(os.Getpid())); code != 0 || !strings.Contains(out, "FAKE KEY") {
		t.Errorf("isolation=none: %q (exit %d), want the host's files and processes in sight", out, code)
	}
	if l.Capabilities().Egress {
		t.Error("isolation=none reports egress enforced")
	}
}

// TestIsolatedGateway: the tunnel the engine serves its gateway on is
// reached from inside at the address it names, and egress is enforced.
func TestIsolatedGateway(t *testing.T) {
	l := isolatedLease(t, driver.EgressGateway, nil)
	if !l.Capabilities().Egress {
		t.Error("an isolated lease does not report egress enforced")
	}
	addr, ln, err := l.Tunnel(t.Context())
	if err != nil {
		t.Fatalf("Tunnel: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "gateway "+r.URL.Path) })}
	go srv.Serve(ln)
	defer srv.Close()
	host, port, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf 'GET /v1/messages HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && cat <&3`, host, port)
	out, code := hostile(t, l, script)
	if code != 0 || !strings.Contains(out, "gateway /v1/messages") {
		t.Errorf("reaching the gateway at %s: %q (exit %d)", addr, out, code)
	}
}

// TestIsolatedSignalStatus: a program of an isolated lease with a tunnel
// runs under the forwarder, which reports a death by signal out of
// bubblewrap (that says 128+n): SIGKILL reads as killed, an exit of 137
// as 137, a stray "signal" line the program writes changes nothing.
func TestIsolatedSignalStatus(t *testing.T) {
	l := isolatedLease(t, driver.EgressGateway, nil)
	_, ln, err := l.Tunnel(t.Context())
	if err != nil {
		t.Fatalf("Tunnel: %v", err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		script string
		want   harness.ExitStatus
	}{
		{"kill -KILL $$", harness.ExitStatus{Code: -1, Signal: "killed"}},
		{"kill -TERM $$", harness.ExitStatus{Code: -1, Signal: "terminated"}},
		{"exit 137", harness.ExitStatus{Code: 137}},
		{"echo 'signal 9' >&3; exit 137", harness.ExitStatus{Code: 137}}, // the report's descriptor is not the program's
		{"exit 3", harness.ExitStatus{Code: 3}},
	} {
		res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", tc.script}, Env: env(l)}, 1<<10)
		if err != nil {
			t.Fatalf("%s: %v", tc.script, err)
		}
		if res.Status != tc.want {
			t.Errorf("%s: status %+v, want %+v (stderr %q)", tc.script, res.Status, tc.want, res.Stderr)
		}
	}
}

// TestIsolatedOpenEgress: egress open keeps the host's network, the
// filesystem still isolated.
func TestIsolatedOpenEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") }))
	defer srv.Close()
	l := isolatedLease(t, driver.EgressOpen, nil)
	hp := strings.Replace(strings.TrimPrefix(srv.URL, "http://"), ":", "/", 1)
	if out, code := hostile(t, l, "exec 3<>/dev/tcp/"+hp+" && echo connected"); code != 0 {
		t.Errorf("egress open: the host's loopback unreachable: %q", out)
	}
	if _, ok := l.Sandbox().(driver.Tunneler); ok {
		t.Error("a lease on the host's network offers a tunnel")
	}
}

// TestIsolatedExtraPaths: ro and rw show more paths; a path that is
// missing or would show the user's home is a configuration error.
func TestIsolatedExtraPaths(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "r"), []byte("readable"), 0o644)
	l := isolatedLease(t, driver.EgressGateway, map[string]string{"ro": ro, "rw": rw})
	if out, code := hostile(t, l, "cat "+ro+"/r && echo x > "+rw+"/w"); code != 0 || !strings.Contains(out, "readable") {
		t.Errorf("ro and rw paths: %q (exit %d)", out, code)
	}
	if out, code := hostile(t, l, "echo x > "+ro+"/w"); code == 0 {
		t.Errorf("writing a ro path succeeded: %q", out)
	}
	home, _ := os.UserHomeDir()
	for _, bad := range []map[string]string{
		{"ro": filepath.Join(t.TempDir(), "missing")},
		{"rw": "relative/path"},
		{"ro": "/"},
		{"rw": filepath.Dir(home)},
	} {
		bad["isolation"] = "namespaces"
		_, err := sandbox.Open("local", bad)
		if outpost.CodeOf(err) != outpost.Configuration {
			t.Errorf("Open(%v): %v, want a configuration error", bad, err)
		}
	}
}

// TestIsolatedHidesOutpostDir: the workspace's .outpost (its .env) is not
// in sight.
func TestIsolatedHidesOutpostDir(t *testing.T) {
	needBwrap(t)
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".outpost"), 0o700)
	os.WriteFile(filepath.Join(wd, ".outpost", ".env"), []byte("ANTHROPIC_API_KEY=sk-ant-in-dotenv"), 0o600)
	p := local.New(&local.Options{BaseDir: shortBase(t), Isolation: "namespaces"})
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if out, _ := hostile(t, l, "cat .outpost/.env"); strings.Contains(out, "sk-ant-in-dotenv") {
		t.Errorf(".outpost/.env read: %q", out)
	}
	// One made while the lease is open (outpost writing its .env beside
	// a running agent) is hidden from the processes started after; while
	// none is there, none appears (bwrap would make the directory).
	wd2 := t.TempDir()
	l2, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: wd2})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close(context.Background())
	if out, code := hostile(t, l2, "ls -a"); code != 0 || strings.Contains(out, ".outpost") {
		t.Errorf("a workspace without .outpost shows one: %q", out)
	}
	if _, err := os.Stat(filepath.Join(wd2, ".outpost")); err == nil {
		t.Error("a process of the lease made .outpost in the workspace")
	}
	os.MkdirAll(filepath.Join(wd2, ".outpost"), 0o700)
	os.WriteFile(filepath.Join(wd2, ".outpost", ".env"), []byte("ANTHROPIC_API_KEY=sk-ant-made-later"), 0o600)
	if out, _ := hostile(t, l2, "cat .outpost/.env"); strings.Contains(out, "sk-ant-made-later") {
		t.Errorf("an .outpost/.env made during the lease was read: %q", out)
	}
}

// TestIsolationWithoutBwrap: namespaces asked for with no bwrap is a
// configuration error naming it; auto, the default (of the registry's
// provider and of New's), falls back with a degraded notice that says,
// loudly, that the lease is not isolated.
func TestIsolationWithoutBwrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := sandbox.Open("local", map[string]string{"isolation": "namespaces"})
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), "bwrap") {
		t.Errorf("isolation=namespaces without bwrap: %v, want a configuration error naming bwrap", err)
	}
	opened, err := sandbox.Open("local", map[string]string{"root": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if iso, _ := opened.(*local.Provider).Isolation(); iso.Mode != "auto" {
		t.Errorf("the registry's default isolation is %q, want auto", iso.Mode)
	}
	p := local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=/usr/bin:/bin"}})
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if err := l.Degraded(); err == nil || !strings.Contains(err.Error(), "bwrap") || !strings.Contains(err.Error(), "NOT ISOLATED") {
		t.Errorf("auto without bwrap: Degraded() = %v, want NOT ISOLATED and why", err)
	}
	if l.Capabilities().Egress {
		t.Error("auto without bwrap reports egress enforced")
	}
	iso, _ := p.Isolation()
	if iso.Mode != "auto" || iso.Active || iso.Reason == "" {
		t.Errorf("Isolation() = %+v, want auto, inactive, with a reason", iso)
	}
}

// TestIsolatedRefusedBwrap: a bwrap that refuses (a stand-in that fails
// as bwrap does where user namespaces are off) gives bwrap's message.
func TestIsolatedRefusedBwrap(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"), 0o755)
	p := local.New(&local.Options{Isolation: "namespaces", Bwrap: fake})
	if _, err := p.Isolation(); err == nil || !strings.Contains(err.Error(), "No permissions to create new namespace") {
		t.Errorf("a refusing bwrap: %v, want its message", err)
	}
	if _, err := p.Open(t.Context(), driver.Options{Workdir: t.TempDir()}); outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("Open with a refusing bwrap: %v, want configuration", err)
	}
	_ = errors.New
}

// tunnelFirst opens a tunnel on every isolated lease it opens with a cut
// network, as the engine does for its gateway before the agent starts.
type tunnelFirst struct{ *local.Provider }

func (p tunnelFirst) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	sb, err := p.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if tn, ok := sb.(driver.Tunneler); ok {
		_, ln, err := tn.Tunnel(ctx)
		if err != nil {
			sb.Close(context.Background())
			return nil, err
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	return sb, nil
}

// bothModes runs f on a lease of each isolation mode (egress gateway, a
// tunnel open: every process behind the forwarder when isolated).
func bothModes(t *testing.T, f func(t *testing.T, l *sandbox.Lease, isolated bool)) {
	for _, mode := range []string{"none", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "namespaces" {
				needBwrap(t)
			}
			p := tunnelFirst{local.New(&local.Options{BaseDir: shortBase(t), Isolation: mode})}
			l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			f(t, l, mode == "namespaces")
		})
	}
}

// TestIsolatedTerminate: Terminate reaches the program, whose handler
// runs, in namespaces as on the host. (Sent to bwrap, it ended bwrap and
// the namespace with a SIGKILL: no agent got to save its session.)
func TestIsolatedTerminate(t *testing.T) {
	bothModes(t, func(t *testing.T, l *sandbox.Lease, _ bool) {
		p, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `trap 'echo handled; exit 3' TERM; echo started; while :; do sleep 1; done`}, Env: env(l)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		go io.Copy(io.Discard, p.Stderr())
		out := bufio.NewReader(p.Stdout())
		if line, err := out.ReadString('\n'); line != "started\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		if err := p.Signal(driver.Terminate); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		st, err := p.Wait()
		if err != nil || string(rest) != "handled\n" || st.Code != 3 {
			t.Errorf("after Terminate: output %q, status %+v, %v; want the TERM handler's line and exit 3", rest, st, err)
		}
	})
}

// leaseProcesses are the host pids of the processes whose environment
// names home as HOME (bwrap and everything it runs for the lease).
func leaseProcesses(home string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ended(pid) {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if slices.Contains(strings.Split(string(b), "\x00"), "HOME="+home) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoLeaseProcesses polls, a bounded while, until no process of the
// lease runs; it returns those left.
func waitNoLeaseProcesses(home string) []int {
	var left []int
	for range 500 {
		if left = leaseProcesses(home); len(left) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return left
}

// TestIsolatedNothingSurvives: what a turn leaves running (a child that
// left its group with setsid, a child in the background) ends when the
// program ends, or when its bwrap is killed; the lease's release is then
// clean. On the host (none), the setsid child outlives all of it: it
// would read the next turns' tokens.
func TestIsolatedNothingSurvives(t *testing.T) {
	const stay = `sleep 100000 & setsid sleep 100000 & echo started`
	for _, how := range []string{"program exits", "bwrap killed"} {
		t.Run(how, func(t *testing.T) {
			bothModes(t, func(t *testing.T, l *sandbox.Lease, isolated bool) {
				script := stay
				if how == "bwrap killed" {
					script += "; exec sleep 100000"
				}
				p, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env(l)})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); line != "started\n" {
					t.Fatalf("first line %q, %v", line, err)
				}
				running := leaseProcesses(l.Home())
				t.Cleanup(func() {
					for _, pid := range leaseProcesses(l.Home()) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				})
				if how == "bwrap killed" {
					// The process Start made: bwrap, or the shell on the host.
					for _, pid := range running {
						if st, _ := readProcStat(pid); st.ppid == os.Getpid() {
							syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				p.Wait()
				left := leaseProcesses(l.Home())
				if isolated {
					left = waitNoLeaseProcesses(l.Home())
				}
				if isolated && len(left) > 0 {
					t.Errorf("%d processes of the lease outlived it: %v (of %v)", len(left), left, running)
				}
				if !isolated && len(left) == 0 {
					t.Error("on the host, nothing outlived the program: the test does not test it")
				}
				if err := l.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
				if _, err := os.Stat(filepath.Dir(l.Home())); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the lease's directory after Close: %v", err)
				}
			})
		})
	}
}

// tunnelClientDir is a directory holding outpost's in-sandbox binary as
// `outpost` (sandboxtest.TunnelBinary), for a lease's PATH.
func tunnelClientDir(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	// A copy: a link's target would be out of an isolated lease's sight.
	if err := testenv.CopyFile(testenv.SandboxBinary(t), filepath.Join(bin, sandboxtest.TunnelBinary)); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestEscape runs the escape suite on both isolation modes: in
// namespaces every row is blocked; on the host (none) the suite reports
// the provider unenforced and every row it tries escapes, which proves
// the rows can fail.
func TestEscape(t *testing.T) {
	bin := tunnelClientDir(t)
	path := bin + ":" + os.Getenv("PATH")
	for _, mode := range []string{"none", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "namespaces" {
				needBwrap(t)
			}
			rep := sandboxtest.RunEscapeTests(t, sandboxtest.EscapeHarness{
				NewProvider: func(t *testing.T) driver.Provider {
					return tunnelFirst{local.New(&local.Options{BaseDir: shortBase(t), Isolation: mode, Environ: []string{"PATH=" + path}})}
				},
			})
			if mode == "namespaces" {
				if rep.Unenforced {
					t.Error("isolated leases reported unenforced")
				}
				return
			}
			if !rep.Unenforced {
				t.Error("isolation=none is not reported unenforced")
			}
			for _, r := range rep.Rows {
				if r.Outcome != sandboxtest.Escaped && r.Outcome != sandboxtest.NotTried {
					t.Errorf("on the host, %s was %s: the row cannot fail", r.Row, r.Outcome)
				}
			}
		})
	}
}

// TestIsolatedForwarderReplaced: the forwarder's cached build removed
// behind the provider's back (another outpost's build replaces older
// ones) does not fail the lease's next processes: it is found anew.
// (Every process then failed: bwrap could not bind the missing file.)
func TestIsolatedForwarderReplaced(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(selfbin.CacheVariable, cache)
	bothModes(t, func(t *testing.T, l *sandbox.Lease, isolated bool) {
		for i := range 2 {
			if out, code := hostile(t, l, "exit 42"); code != 42 {
				t.Fatalf("process %d: exit %d, %q", i, code, out)
			}
			if isolated {
				bins, _ := filepath.Glob(filepath.Join(cache, "bin", "*"))
				if len(bins) == 0 {
					t.Fatalf("no forwarder built in %s", cache)
				}
				for _, b := range bins {
					os.Remove(b)
				}
			}
		}
	})
}
