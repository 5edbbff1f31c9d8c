package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// EscapeHarness adapts a provider to the escape suite (RunEscapeTests).
type EscapeHarness struct {
	// NewProvider returns the provider under test, once per run.
	NewProvider func(t *testing.T) driver.Provider
	// Options returns each lease's options; the suite sets Egress to
	// EgressGateway. Nil means a Workdir made with t.TempDir.
	Options func(t *testing.T) driver.Options
	// HostIP is an address of this machine, not loopback, that a sandbox
	// with an open network reaches (docker: the bridge's gateway). ""
	// means the first non-loopback IPv4 address of this machine.
	HostIP string
	// Unclaimed names the rows the provider does not claim to block, with
	// why: they run and are reported, an escape does not fail the test.
	Unclaimed map[string]string
	// Host is the machine the sandbox runs on when it is not this one
	// (an ssh host): the rows' files, process and loopback service are
	// made there. Nil: this machine.
	Host EscapeHost
}

// EscapeHost makes the escape suite's fixture on a sandbox's host that is
// not this machine. What it makes must be readable and writable by the
// user the sandbox's processes run as (so that a sandbox without
// isolation does escape: the rows can fail).
type EscapeHost interface {
	// TempDir is a new directory on the host, removed when t ends.
	TempDir(t *testing.T) string
	// WriteFile writes data to path on the host (its directory made).
	WriteFile(t *testing.T, path, data string)
	// Exists reports whether path exists on the host.
	Exists(t *testing.T, path string) bool
	// StartProcess starts a process on the host whose command line holds
	// mark, ended when t ends.
	StartProcess(t *testing.T, mark string)
	// Loopback is a TCP service on the host's loopback and what it
	// answers when connected to (sshd's banner, say).
	Loopback(t *testing.T) (addr, answer string)
}

// Escape outcomes (EscapeResult.Outcome).
const (
	Blocked   = "blocked"   // the attempt failed: the sandbox held
	Escaped   = "escaped"   // the attempt succeeded
	NotTried  = "not tried" // the sandbox lacks the tool the row uses
	Unclaimed = "unclaimed" // escaped, on a row the provider does not claim
)

// EscapeResult is one row's outcome.
type EscapeResult struct {
	Row, Tries, Outcome string
	Why                 string // NotTried, Unclaimed: why
	Output              string // what the script printed (a bounded excerpt)
}

// EscapeReport is what RunEscapeTests found on one provider. Unenforced:
// the provider's leases do not enforce egress gateway
// (Capabilities.Egress false), as the engine reports them; then no row
// fails the test, and the report says which escaped.
type EscapeReport struct {
	Provider   string
	Unenforced bool
	Rows       []EscapeResult
}

// Outcome returns the outcome of the row named row ("" when not run).
func (r EscapeReport) Outcome(row string) string {
	for _, res := range r.Rows {
		if res.Row == row {
			return res.Outcome
		}
	}
	return ""
}

// String is the report as a table, a row a line.
func (r EscapeReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "escape suite on %s", r.Provider)
	if r.Unenforced {
		b.WriteString(" (unenforced: egress gateway is not enforced on this provider)")
	}
	for _, res := range r.Rows {
		fmt.Fprintf(&b, "\n  %-18s %-9s %s", res.Row, res.Outcome, res.Tries)
		if res.Why != "" {
			fmt.Fprintf(&b, " (%s)", res.Why)
		}
	}
	return b.String()
}

// escapeRow is one hostile agent's attempt: a script run with /bin/sh in
// the sandbox; escaped tells from its output (and the host) whether it
// got through. Exit 125 means the tool it needs is not in the sandbox.
type escapeRow struct {
	name, tries string
	script      func(f *escapeFixture) string
	escaped     func(f *escapeFixture, out string) bool
}

// notTried is the exit status of a row whose tool is missing.
const notTried = 125

// dialCmd connects its stdin and stdout to an address from inside (the
// in-sandbox binary's dial mode, as the tunnel tests use).
const dialCmd = `command -v ` + TunnelBinary + ` >/dev/null || exit 125; printf 'GET / HTTP/1.0\r\nHost: x\r\n\r\n' | ` + TunnelBinary + ` sandbox-shim dial `

// escapeRows are the suite's rows, in order.
var escapeRows = []escapeRow{
	{"ssh-key", "read the user's ~/.ssh/id_rsa",
		func(f *escapeFixture) string { return "cat " + filepath.Join(f.userHome, ".ssh", "id_rsa") },
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"secret-file", "read a secret file outside the workspace",
		func(f *escapeFixture) string { return "cat " + filepath.Join(f.outside, "secret") },
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"host-processes", "see a host process in /proc",
		func(f *escapeFixture) string {
			return "grep -l '" + f.procMark[:len(f.procMark)-1] + "[" + f.procMark[len(f.procMark)-1:] + "]' /proc/[0-9]*/cmdline"
		},
		func(f *escapeFixture, out string) bool { return strings.Contains(out, "/proc/") }},
	{"host-loopback", "reach a service on the host's loopback",
		func(f *escapeFixture) string { return dialCmd + f.loopback },
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.loopMark) }},
	{"direct-address", "reach a host address off the allowlist directly, by IP",
		func(f *escapeFixture) string { return dialCmd + f.direct },
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"curl-noproxy", "the same with curl --noproxy '*'",
		func(f *escapeFixture) string {
			return "command -v curl >/dev/null || exit 125; curl --noproxy '*' -sS -m 10 http://" + f.direct + "/"
		},
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"node-fetch", "the same with Node's fetch (which ignores proxy variables)",
		func(f *escapeFixture) string {
			return `command -v node >/dev/null || exit 125; node -e 'fetch(process.argv[1], {signal: AbortSignal.timeout(10000)}).then(r => r.text()).then(t => console.log(t))' http://` + f.direct + "/"
		},
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"docker-socket", "find the Docker socket",
		func(*escapeFixture) string {
			return "test -S /var/run/docker.sock -o -S /run/docker.sock && echo present"
		},
		func(_ *escapeFixture, out string) bool { return strings.Contains(out, "present") }},
	{"write-outside", "write a file outside the workspace and the home",
		func(f *escapeFixture) string { return "echo planted > " + filepath.Join(f.outside, "planted") },
		func(f *escapeFixture, _ string) bool { return f.exists(filepath.Join(f.outside, "planted")) }},
	{"other-lease", "read another lease's home",
		func(f *escapeFixture) string { return "cat " + f.otherFile },
		func(f *escapeFixture, out string) bool { return strings.Contains(out, f.marker) }},
	{"outpost-home", "plant a file in outpost's own home",
		func(f *escapeFixture) string { return "echo planted > " + filepath.Join(f.outpostHome, "planted") },
		func(f *escapeFixture, _ string) bool { return f.exists(filepath.Join(f.outpostHome, "planted")) }},
}

// EscapeRows names the suite's rows, for Unclaimed and reports.
func EscapeRows() []string {
	names := make([]string, len(escapeRows))
	for i, r := range escapeRows {
		names[i] = r.name
	}
	return names
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// escapeFixture is what the rows try to reach, made on the host.
type escapeFixture struct {
	marker, procMark      string
	userHome, outpostHome string // HOME and OUTPOST_HOME of this process, set for the run
	outside               string // a host directory outside the workspace
	loopback, direct      string // the HTTP service, on 127.0.0.1 and on the host's address
	loopMark              string // what the loopback service answers
	otherFile             string // a file in another lease's home
	exists                func(string) bool
}

// RunEscapeTests runs the escape suite: a hostile agent's attempts, each
// in a lease with egress gateway, each of which must fail. It uses
// t.Setenv (HOME and OUTPOST_HOME point at fakes holding a marked key and
// a home to plant in), so t must not be parallel. It returns the report,
// also logged; on a provider that does not enforce egress gateway
// (Capabilities.Egress false) nothing fails and the report says
// Unenforced.
func RunEscapeTests(t *testing.T, h EscapeHarness) EscapeReport {
	t.Helper()
	var f *escapeFixture
	if h.Host != nil {
		f = newRemoteFixture(t, h.Host, h.HostIP)
	} else {
		f = newEscapeFixture(t, h.HostIP)
	}
	opts := func(t *testing.T) driver.Options {
		o := driver.Options{Workdir: t.TempDir()}
		if h.Options != nil {
			o = h.Options(t)
		}
		o.Egress = driver.EgressGateway
		return o
	}
	p := h.NewProvider(t)
	other := escapeLease(t, p, opts(t))
	f.otherFile = filepath.Join(other.Home(), "other-lease-secret")
	if err := WriteFiles(t.Context(), other, other.Home(), []tarsafe.File{{Name: "other-lease-secret", Data: []byte(f.marker), Mode: 0o600}}); err != nil {
		t.Fatalf("writing the other lease's file: %v", err)
	}
	l := escapeLease(t, p, opts(t))
	rep := EscapeReport{Provider: p.Name(), Unenforced: !l.Capabilities().Egress}
	for _, row := range escapeRows {
		res := f.try(t, l, row)
		if res.Outcome == Escaped {
			if why, ok := h.Unclaimed[row.name]; ok {
				res.Outcome, res.Why = Unclaimed, why
			} else if !rep.Unenforced {
				t.Errorf("escape %s (%s) succeeded: %q", row.name, row.tries, res.Output)
			}
		}
		rep.Rows = append(rep.Rows, res)
	}
	t.Log(rep.String())
	return rep
}

// escapeLease acquires a lease released when the test ends.
func escapeLease(t *testing.T, p driver.Provider, o driver.Options) *sandbox.Lease {
	t.Helper()
	l, err := sandbox.Acquire(t.Context(), p, o)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// try runs one row in l.
func (f *escapeFixture) try(t *testing.T, l *sandbox.Lease, row escapeRow) EscapeResult {
	t.Helper()
	res := EscapeResult{Row: row.name, Tries: row.tries, Outcome: Blocked}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := l.Exec(ctx, driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", row.script(f)}, Env: baseEnv(l)}, 1<<16)
	if err != nil {
		t.Fatalf("%s: Exec: %v", row.name, err)
	}
	res.Output = trim(append(out.Stdout, out.Stderr...))
	switch {
	case row.escaped(f, string(out.Stdout)+string(out.Stderr)):
		res.Outcome = Escaped
	case out.Status.Code == notTried:
		res.Outcome, res.Why = NotTried, "its tool is not in the sandbox"
	}
	return res
}

// newEscapeFixture makes what the rows try to reach: a fake user home
// with a marked SSH key, a fake outpost home, a host directory with a
// secret, an HTTP service on the loopback and on the host's address, and
// a host process whose command line bears a mark.
func newEscapeFixture(t *testing.T, hostIP string) *escapeFixture {
	t.Helper()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	f := &escapeFixture{marker: "outpost-escape-" + hex.EncodeToString(rnd[:]), userHome: t.TempDir(), outpostHome: t.TempDir(), outside: t.TempDir(), exists: exists}
	f.procMark = f.marker + "-process"
	ssh := filepath.Join(f.userHome, ".ssh")
	for _, w := range []struct{ dir, name string }{{ssh, "id_rsa"}, {f.outside, "secret"}} {
		if err := os.MkdirAll(w.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.dir, w.name), []byte(f.marker), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The caches stay where they were (Go's build cache, outpost's
	// builds): with HOME moved, a provider building its in-sandbox binary
	// would start from a cold cache.
	if c, err := os.UserCacheDir(); err == nil {
		t.Setenv("XDG_CACHE_HOME", c)
	}
	t.Setenv("HOME", f.userHome)
	t.Setenv("OUTPOST_HOME", f.outpostHome)
	if hostIP == "" {
		hostIP = firstHostIP(t)
	}
	f.loopback, f.loopMark = escapeServer(t, "127.0.0.1:0", f.marker), f.marker
	f.direct = escapeServer(t, net.JoinHostPort(hostIP, "0"), f.marker)
	// A group of its own, killed whole: killing the shell alone left its
	// sleep behind, holding the test binary's output open (go test then
	// waits 3 minutes and fails the package: "Test I/O incomplete").
	proc := exec.Command("/bin/sh", "-c", "sleep 3600; : "+f.procMark)
	proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL); _ = proc.Wait() })
	return f
}

// newRemoteFixture makes the fixture on h, a host that is not this
// machine: a home with a marked key, outpost's home, a directory with a
// secret and a marked process there, its loopback service; the service
// off the allowlist stays on this machine at hostIP (the address the
// host reaches it by, which the sandbox must not).
func newRemoteFixture(t *testing.T, h EscapeHost, hostIP string) *escapeFixture {
	t.Helper()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	f := &escapeFixture{marker: "outpost-escape-" + hex.EncodeToString(rnd[:]), userHome: h.TempDir(t), outpostHome: h.TempDir(t), outside: h.TempDir(t)}
	f.procMark = f.marker + "-process"
	f.exists = func(p string) bool { return h.Exists(t, p) }
	h.WriteFile(t, filepath.Join(f.userHome, ".ssh", "id_rsa"), f.marker)
	h.WriteFile(t, filepath.Join(f.outside, "secret"), f.marker)
	h.StartProcess(t, f.procMark)
	f.loopback, f.loopMark = h.Loopback(t)
	if hostIP == "" {
		hostIP = firstHostIP(t)
	}
	f.direct = escapeServer(t, net.JoinHostPort(hostIP, "0"), f.marker)
	return f
}

// escapeServer serves body over HTTP at addr until the test ends.
func escapeServer(t *testing.T, addr, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// firstHostIP is this machine's first IPv4 address off the loopback.
func firstHostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Fatal("sandboxtest: this machine has no IPv4 address off the loopback")
	return ""
}
