package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/isolate"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// isolation sets a provider's isolation mode.
func isolation(mode string) func(*sshp.Options) {
	return func(o *sshp.Options) { o.Isolation = mode }
}

// try runs a shell script in l and returns its output and exit status.
func try(t *testing.T, l *sandbox.Lease, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := l.Exec(ctx, driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env(l.Sandbox())}, 1<<16)
	if err != nil {
		t.Fatalf("Exec %q: %v", script, err)
	}
	return string(out.Stdout) + string(out.Stderr), out.Status.Code
}

// TestIsolation runs a hostile agent's attempts on the host in both
// modes: in namespaces (the test host has bubblewrap) each fails; as the
// host's user (none) each succeeds, so that every check can fail.
func TestIsolation(t *testing.T) {
	srv := sshtest.Shared(t)
	const marker = "outpost-ssh-isolation-marker"
	// What the host's user has outside the lease: a key in ~/.ssh, and a
	// process of the host.
	srv.MustExec(t, "sh", "-c", "mkdir -p /home/agent/.ssh && echo "+marker+" >/home/agent/.ssh/id_rsa && chown -R agent /home/agent/.ssh")
	srv.MustExec(t, "sh", "-c", "setsid sh -c 'sleep 600; : "+marker+"-process' >/dev/null 2>&1 </dev/null &")
	t.Cleanup(func() { _, _, _ = srv.Exec(context.Background(), "pkill", "-f", marker+"-process") })
	for _, mode := range []string{isolate.None, isolate.Namespaces} {
		t.Run(mode, func(t *testing.T) {
			p := sshtest.Provider(t, srv, isolation(mode))
			// egress gateway: in namespaces, loopback only
			other := lease(t, p, driver.Options{Egress: driver.EgressGateway})
			if out, code := try(t, other, "echo "+marker+" > \"$HOME/secret\""); code != 0 {
				t.Fatalf("writing the other lease's file: %d %s", code, out)
			}
			l := lease(t, p, driver.Options{Egress: driver.EgressGateway})
			isolated := mode == isolate.Namespaces
			if got := l.Capabilities().Isolation; got != map[bool]string{true: driver.IsolationNamespaces, false: driver.IsolationNone}[isolated] {
				t.Errorf("Capabilities().Isolation = %q", got)
			}
			if l.Capabilities().Egress != isolated {
				t.Errorf("Capabilities().Egress = %v on %s", l.Capabilities().Egress, mode)
			}
			for _, c := range []struct{ what, script, escaped string }{
				{"the user's ~/.ssh", "cat /home/agent/.ssh/id_rsa", marker},
				{"another lease's home", "cat " + other.Home() + "/secret", marker},
				{"a host process", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", marker + "-process"},
				{"sshd on the host's loopback", "outpost sandbox-shim dial 127.0.0.1:22 </dev/null", "SSH-2.0-OpenSSH"},
				{"outpost's leases", "ls " + path.Dir(path.Dir(other.Home())), other.Sandbox().ID()},
			} {
				out, _ := try(t, l, c.script)
				if got := strings.Contains(out, c.escaped); got == isolated {
					t.Errorf("%s: reading %s: %q", mode, c.what, out)
				}
			}
			// The lease's own: its home and workspace are writable, its
			// TMPDIR too, and the programs of the host run.
			if out, code := try(t, l, `echo a >"$HOME/f" && echo b >"$TMPDIR/f" && echo c >./f && cat "$HOME/f" "$TMPDIR/f" ./f && tar --version >/dev/null`); code != 0 || out != "a\nb\nc\n" {
				t.Errorf("the lease's own files: %d %q", code, out)
			}
		})
	}
}

// TestIsolationSignalsAndSurvivors: in namespaces, a SIGTERM reaches the
// program (which may clean up), not bubblewrap (which would end it with a
// SIGKILL), and nothing the program started outlives it, not even what
// left its session.
func TestIsolationSignalsAndSurvivors(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.Provider(t, srv, isolation(isolate.Namespaces))
	l := lease(t, p, driver.Options{})
	const mark = "outpost-ssh-iso-survivor"
	pr, err := l.Sandbox().Start(t.Context(), driver.ExecRequest{Path: "sh", Args: []string{"-c", "trap 'echo terminated; exit 3' TERM; setsid sh -c 'sleep 600; : " + mark + "' & echo started; while :; do sleep 0.1; done"}, Env: env(l.Sandbox())})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if n, err := pr.Stdout().Read(b); err != nil || string(b[:n]) != "started\n" {
		t.Fatalf("first output %q, %v", b[:n], err)
	}
	stderr := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(pr.Stderr()); stderr <- b }()
	ps := srv.MustExec(t, "ps", "-eo", "pid,ppid,pgid,sid,args")
	if err := pr.Signal(driver.Terminate); err != nil {
		t.Fatal(err)
	}
	stuck := time.AfterFunc(time.Minute, func() { _ = pr.Signal(driver.Kill) })
	defer stuck.Stop()
	rest, _ := io.ReadAll(pr.Stdout())
	if !stuck.Stop() {
		t.Errorf("SIGTERM did not end the program within a minute; the host's processes then:\n%s", ps)
	}
	st, err := pr.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 3 || !strings.Contains(string(rest), "terminated") {
		t.Errorf("after SIGTERM: status %+v, output %q, stderr %q: the program's trap did not run", st, rest, <-stderr)
	}
	_ = pr.Close()
	deadline := time.Now().Add(20 * time.Second)
	for survivors(t, srv, mark) != "" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if s := survivors(t, srv, mark); s != "" {
		t.Errorf("outlived the program:\n%s", s)
	}
}

// TestIsolationTunnel: a lease in namespaces with egress gateway has
// loopback only, and reaches this machine through its tunnel (a Unix
// socket forwarded over the connection), at the address Tunnel gave, in
// processes started after the tunnel opened.
func TestIsolationTunnel(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.Provider(t, srv, isolation(isolate.Namespaces))
	l := lease(t, p, driver.Options{Egress: driver.EgressGateway})
	addr, ln, err := l.Sandbox().(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "through the tunnel") })}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("tunnel address %q", addr)
	}
	out, code := try(t, l, "printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' | outpost sandbox-shim dial "+addr)
	if code != 0 || !strings.Contains(out, "through the tunnel") {
		t.Errorf("through the tunnel: %d %q", code, out)
	}
	// The network is cut: a server on this machine's bridge address,
	// which the host reaches (a lease with the host's network would),
	// is out of reach; so is the host's own loopback.
	direct, err := net.Listen("tcp", net.JoinHostPort(srv.Gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ds := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached directly") })}
	go func() { _ = ds.Serve(direct) }()
	t.Cleanup(func() { _ = ds.Close() })
	get := "printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' | outpost sandbox-shim dial "
	if out, _ := try(t, l, get+direct.Addr().String()+"; outpost sandbox-shim dial 127.0.0.1:22 </dev/null"); strings.Contains(out, "reached directly") || strings.Contains(out, "SSH-2.0") {
		t.Errorf("the network of an isolated lease with egress gateway: %q", out)
	}
	open := lease(t, sshtest.Provider(t, srv, isolation(isolate.None)), driver.Options{})
	if out, _ := try(t, open, get+direct.Addr().String()); !strings.Contains(out, "reached directly") {
		t.Errorf("a lease with the host's network does not reach %s: %q (the check above proves nothing)", direct.Addr(), out)
	}
	// With a tunnel the forwarder is the program's parent inside and
	// reports a death by signal, which bwrap alone turns into 128+n.
	for script, want := range map[string]harness.ExitStatus{
		"kill -KILL $$": {Code: -1, Signal: "killed"},
		"exit 137":      {Code: 137},
	} {
		res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env(l.Sandbox())}, 1<<10)
		if err != nil || res.Status != want {
			t.Errorf("%s: status %+v, %v; want %+v", script, res.Status, err, want)
		}
	}
	// Closing the tunnel refuses its address in later processes.
	_ = ln.Close()
	if out, _ := try(t, l, "outpost sandbox-shim dial "+addr+" </dev/null && echo reached"); strings.Contains(out, "reached") {
		t.Errorf("a closed tunnel's address: %q", out)
	}
}

// TestIsolationEscapeSuite runs the shared escape suite with its fixture
// on the ssh host (sshHost): in namespaces every row is blocked; with
// isolation=none the leases are reported unenforced and every row tried
// escapes, so the suite can fail there.
func TestIsolationEscapeSuite(t *testing.T) {
	srv := sshtest.Shared(t)
	for _, mode := range []string{isolate.None, isolate.Namespaces} {
		t.Run(mode, func(t *testing.T) {
			rep := sandboxtest.RunEscapeTests(t, sandboxtest.EscapeHarness{
				NewProvider: func(t *testing.T) driver.Provider { return sshtest.Provider(t, srv, isolation(mode)) },
				HostIP:      srv.Gateway,
				Host:        sshHost{srv},
			})
			if mode == isolate.Namespaces {
				if rep.Unenforced {
					t.Error("isolated ssh leases reported unenforced")
				}
				return
			}
			if !rep.Unenforced {
				t.Error("isolation=none is not reported unenforced")
			}
			for _, r := range rep.Rows {
				if r.Row == "docker-socket" {
					continue // the test host has no Docker socket to find
				}
				if r.Outcome != sandboxtest.Escaped && r.Outcome != sandboxtest.NotTried {
					t.Errorf("as the host's user, %s was %s: the row cannot fail", r.Row, r.Outcome)
				}
			}
		})
	}
}

// sshHost is the test sshd's container as the escape suite's host: what
// it makes belongs to the login user (agent), as the user's own files do.
type sshHost struct{ srv *sshtest.Server }

func (h sshHost) TempDir(t *testing.T) string {
	d := strings.TrimSpace(h.srv.MustExec(t, "sh", "-c", "d=$(mktemp -d /tmp/escape-XXXXXX) && chown agent \"$d\" && echo \"$d\""))
	t.Cleanup(func() { _, _, _ = h.srv.Exec(context.Background(), "rm", "-rf", d) })
	return d
}

func (h sshHost) WriteFile(t *testing.T, p, data string) {
	h.srv.MustExec(t, "sh", "-c", `mkdir -p "$(dirname "$1")" && printf %s "$2" >"$1" && chown -R agent "$(dirname "$1")"`, "sh", p, data)
}

func (h sshHost) Exists(t *testing.T, p string) bool {
	code, _, err := h.srv.Exec(context.Background(), "test", "-e", p)
	if err != nil {
		t.Fatal(err)
	}
	return code == 0
}

func (h sshHost) StartProcess(t *testing.T, mark string) {
	h.srv.MustExec(t, "su", "agent", "-s", "/bin/sh", "-c", "setsid sh -c 'sleep 3600; : "+mark+"' >/dev/null 2>&1 </dev/null &")
	t.Cleanup(func() { _, _, _ = h.srv.Exec(context.Background(), "pkill", "-f", mark) })
}

func (h sshHost) Loopback(*testing.T) (string, string) { return "127.0.0.1:22", "SSH-2.0-OpenSSH" }

// TestIsolationUnavailable: a host whose bwrap cannot be had runs auto's
// leases as its user with a degraded notice, and refuses namespaces with
// a configuration error naming the cause.
func TestIsolationUnavailable(t *testing.T) {
	srv := sshtest.Shared(t)
	missing := func(mode string) func(*sshp.Options) {
		return func(o *sshp.Options) { o.Isolation, o.Bwrap = mode, "/nonexistent/bwrap" }
	}
	p := sshtest.Provider(t, srv, missing(isolate.Auto))
	l := lease(t, p, driver.Options{})
	if err := l.Degraded(); err == nil || !strings.Contains(err.Error(), "NOT ISOLATED") {
		t.Errorf("Degraded() = %v", err)
	}
	if c := l.Capabilities(); c.Isolation != driver.IsolationNone || c.Egress {
		t.Errorf("Capabilities() = %+v", c)
	}
	if note := p.IsolationNote(); !strings.Contains(note, "bwrap") {
		t.Errorf("IsolationNote() = %q", note)
	}
	p = sshtest.Provider(t, srv, missing(isolate.Namespaces))
	_, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if !errors.Is(err, isolate.ErrUnavailable) || outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("Acquire with isolation=namespaces and no bwrap: %v (code %s)", err, outpost.CodeOf(err))
	}
	if _, err := sshp.New(&sshp.Options{Host: "h", Isolation: "maybe", Config: "none"}); outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("isolation=maybe: %v", err)
	}
}

// TestIsolationUnreachableHost: with isolation=auto, asking a provider
// whose host cannot be reached what it isolates answers "none" (its
// leases then fail with the connection's error), and says why.
func TestIsolationUnreachableHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	p, err := sshp.New(&sshp.Options{Host: addr, Config: "none", KnownHosts: filepath.Join(t.TempDir(), "known_hosts"), Identity: filepath.Join(t.TempDir(), "none"), StartTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		if c := p.Capabilities(); c.Isolation != driver.IsolationNone || c.Egress {
			t.Errorf("Capabilities() = %+v", c)
		}
	}
	if note := p.IsolationNote(); !strings.Contains(note, "NOT ISOLATED") {
		t.Errorf("IsolationNote() = %q", note)
	}
}
