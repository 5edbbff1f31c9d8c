// Package isolate builds the bubblewrap (bwrap) command line that runs a
// process of a sandbox on the host (local, and an ssh host through the
// exec shim's --isolate) in namespaces
// of its own: a filesystem of the system's directories read-only, the
// lease's home and the workspace writable, a private /tmp, /proc and /dev,
// and nothing else of the host's; a private PID namespace; the host's
// network, or, with a cut network, loopback only, with the tunnels the
// lease opened forwarded to the host over Unix sockets by the in-sandbox
// binary's forward mode (internal/tunnel/inside).
//
// Probe tells, once per bwrap path and process, whether bwrap runs here
// with the namespaces Args asks for.
package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Modes of the isolation setting.
const (
	Auto       = "auto"
	Namespaces = "namespaces"
	None       = "none"
)

// ErrUnavailable is wrapped by Probe's error: bwrap is missing or refused
// to make the namespaces.
var ErrUnavailable = errors.New("bubblewrap isolation is not available")

// System are the host's directories every isolated process sees, read-only
// (those the host has). The rest of the root is an empty tmpfs.
var System = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Secrets are files and directories under System that are hidden (an
// empty file or directory in their place) where the host has them: the
// password hashes, the SSH host keys, TLS private keys.
var Secrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/ssl/private", "/etc/ssh"}

// ShimPath is where the in-sandbox binary (the forwarder) appears inside.
const ShimPath = "/run/outpost/outpost-sandbox"

// TunnelPort is the first loopback port of an isolated lease's tunnels
// inside its network namespace (each lease has its own loopback): its
// n-th tunnel is 127.0.0.1:TunnelPort+n.
const TunnelPort = 41000

// MaxSocketPath is the longest Unix socket path a tunnel uses on the host
// (Linux takes 107 bytes).
const MaxSocketPath = 100

// socketDir is where the tunnels' Unix sockets appear inside.
const socketDir = "/run/outpost"

// probeTimeout bounds the probe's run of bwrap.
const probeTimeout = 10 * time.Second

var probes sync.Map // bwrap path -> *probe

type probe struct {
	once sync.Once
	err  error
}

// Probe reports whether bwrap (a path, or "" for the one on PATH) runs
// with a private user (where it needs one), PID and network namespace on
// this machine, running it once per path for the process. It returns the
// absolute path of bwrap, or an error wrapping ErrUnavailable that says
// why (bwrap missing, or bwrap's own message).
func Probe(bwrap string) (string, error) {
	if bwrap == "" {
		bwrap = "bwrap"
	}
	p, err := exec.LookPath(bwrap)
	if err != nil {
		return "", fmt.Errorf("%w: bwrap (Debian's bubblewrap) is not on the PATH", ErrUnavailable)
	}
	v, _ := probes.LoadOrStore(p, &probe{})
	pr := v.(*probe)
	pr.once.Do(func() { pr.err = run(p) })
	return p, pr.err
}

// run probes bwrap with the namespaces and the kind of mounts Args makes:
// the system's directories, not the whole root (binding / recursively
// met a mount another program was removing, the test cluster's network
// namespaces under /tmp, and failed the probe for the whole process). A
// failure is tried once more, a moment later, before it is believed.
func run(bwrap string) error {
	args := []string{"--unshare-all", "--die-with-parent", "--new-session"}
	for _, d := range System {
		args = append(args, "--ro-bind-try", d, d)
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--", "/bin/true")
	var err error
	for try := range 2 {
		if try > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if err = runOnce(bwrap, args); err == nil {
			return nil
		}
	}
	return err
}

func runOnce(bwrap string, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bwrap, args...)
	cmd.Stderr = &stderr
	cmd.Env = []string{}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%w: %s refused to make namespaces (user namespaces refused on this host?): %s", ErrUnavailable, bwrap, msg)
	}
	return nil
}

// Forward is one tunnel carried out of a cut network: connections to Addr
// (127.0.0.1:port) inside reach the Unix socket Socket on the host.
type Forward struct {
	Addr   string
	Socket string
}

// Spec is what an isolated process sees. Paths are the host's and appear
// at the same place inside.
type Spec struct {
	Home    string            // the lease's home: writable
	Workdir string            // the workspace: writable
	Hide    []string          // directories under Workdir replaced by an empty tmpfs where they exist when a process starts (.outpost)
	RO, RW  []string          // extra paths, read-only and writable
	Shown   []string          // more read-only paths (the program's tree, PATH's directories: Show)
	Hidden  []string          // never shown by Show (the user's home, the leases' directory, the root)
	Exists  func(string) bool `json:"-"`
	// Net keeps the host's network; otherwise the process has loopback
	// only and Forwards run through Shim.
	Net      bool
	Forwards []Forward
	Shim     string // the in-sandbox binary on the host (for Forwards)
	// ForwardMode is the shim's arguments before the forwards
	// ("sandbox-shim", "forward").
	ForwardMode []string
}

// Args are bwrap's arguments that run path with args in dir under s.
func (s Spec) Args(path string, args []string, dir string) []string {
	a := []string{"--die-with-parent", "--new-session", "--unshare-user-try", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}
	if !s.Net {
		a = append(a, "--unshare-net")
	}
	for _, d := range System {
		a = append(a, "--ro-bind-try", d, d)
	}
	for _, d := range Secrets {
		if s.Exists != nil && s.Exists(d) {
			if strings.HasSuffix(d, "ssh") || strings.HasSuffix(d, "private") {
				a = append(a, "--tmpfs", d)
			} else {
				a = append(a, "--ro-bind", "/dev/null", d)
			}
		}
	}
	if s.Net && s.Exists != nil {
		// A resolv.conf that links into /run (systemd-resolved) needs its target.
		if t, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !under(t, "/etc") && !under(t, "/usr") {
			a = append(a, "--ro-bind-try", t, t)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	for _, p := range s.Shown {
		a = append(a, "--ro-bind-try", p, p)
	}
	for _, p := range s.RO {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a, "--bind", s.Workdir, s.Workdir)
	for _, h := range s.Hide {
		// One that is not there stays absent: bwrap would make it (in
		// the workspace, which the copy-back then refuses).
		if s.Exists == nil || s.Exists(h) {
			a = append(a, "--tmpfs", h)
		}
	}
	a = append(a, "--bind", s.Home, s.Home)
	for _, p := range s.RW {
		a = append(a, "--bind", p, p)
	}
	a = append(a, "--chdir", dir)
	if s.Forwarding() {
		a = append(a, "--ro-bind", s.Shim, ShimPath)
		fw := append(append([]string{}, s.ForwardMode...), StatusArg)
		for i, f := range s.Forwards {
			in := fmt.Sprintf("%s/gateway-%d.sock", socketDir, i)
			a = append(a, "--bind", f.Socket, in)
			fw = append(fw, f.Addr+"="+in)
		}
		a = append(a, "--", ShimPath)
		a = append(a, fw...)
		a = append(a, "--", path)
		return append(a, args...)
	}
	a = append(a, "--", path)
	return append(a, args...)
}

// Forwarding reports whether Args runs the program under the forwarder
// (tunnels out of a cut network), which is then the program's parent
// inside the namespaces and reports its death by signal on StatusFD: the
// caller gives bwrap a Reporter's write end as that descriptor.
func (s Spec) Forwarding() bool { return len(s.Forwards) > 0 && !s.Net }

// StatusFD is the descriptor bwrap passes on to the forwarder for its
// report (exec.Cmd.ExtraFiles[0]), and StatusArg the forwarder's argument
// that names it.
const StatusFD = 3

var StatusArg = "--status-fd=" + strconv.Itoa(StatusFD)

// Reporter carries the forwarder's report of how the program ended out
// of bubblewrap, which reports a death by signal n as exit 128+n: a
// program that exits 137 and one killed by SIGKILL look alike from
// outside the namespaces.
type Reporter struct{ r, w *os.File }

// NewReporter makes the pipe; Child is its write end for the command's
// ExtraFiles, closed by Started once the command started.
func NewReporter() (*Reporter, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &Reporter{r: r, w: w}, nil
}

// Child is the write end, to be the child's StatusFD.
func (p *Reporter) Child() *os.File { return p.w }

// Started closes the parent's copy of the write end.
func (p *Reporter) Started() { p.w.Close() }

// Close releases the pipe.
func (p *Reporter) Close() {
	p.w.Close()
	p.r.Close()
}

// Signal reads the report once bwrap exited with code: the signal that
// ended the program when the forwarder reported one and code is 128 plus
// it; otherwise ok is false and code stands. It never blocks (a report is
// written before the forwarder exits, so before bwrap does) and closes
// the pipe.
func (p *Reporter) Signal(code int) (sig syscall.Signal, ok bool) {
	defer p.Close()
	if code <= 128 {
		return 0, false
	}
	fd := int(p.r.Fd())
	if syscall.SetNonblock(fd, true) != nil {
		return 0, false
	}
	buf := make([]byte, 32)
	n, err := syscall.Read(fd, buf)
	if err != nil || n <= 0 {
		return 0, false
	}
	return ParseReport(string(buf[:n]), code)
}

// ParseReport reads a forwarder's report ("signal N\n"): N when it
// matches bwrap's exit code 128+N.
func ParseReport(report string, code int) (syscall.Signal, bool) {
	sig, ok := ParseSignal(report)
	if !ok || 128+int(sig) != code {
		return 0, false
	}
	return sig, true
}

// ParseSignal reads "signal N" (a forwarder's report, the exec shim's
// status file): the signal N, 1 to 64.
func ParseSignal(report string) (syscall.Signal, bool) {
	v, ok := strings.CutPrefix(strings.TrimSpace(report), "signal ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 64 {
		return 0, false
	}
	return syscall.Signal(n), true
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Under reports whether the host path p is dir or below it (both clean).
func Under(p, dir string) bool { return under(p, dir) }

// CheckPaths checks the extra paths of a setting: absolute, clean, present,
// and neither the root nor holding one of hidden (the user's home, the
// provider's directory of leases): such a path would undo the isolation.
func CheckPaths(paths []string, hidden ...string) error {
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("%q is not an absolute clean path", p)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%q does not exist", p)
		}
		if p == "/" {
			return fmt.Errorf("%q would show the whole host", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		for _, h := range hidden {
			if h != "" && (under(h, p) || under(h, real)) {
				return fmt.Errorf("%q escapes the sandbox: it holds %s", p, h)
			}
		}
	}
	return nil
}

// Show adds to s.Shown what a program needs to run, read-only: the
// directories of pathEnv (its PATH) and the program's tree (the npm
// prefix of a program under node_modules, the parent of a bin directory,
// else the program itself), for path and the file its symlinks lead to.
// Nothing that holds one of s.Hidden is shown, nor what is visible anyway.
func (s *Spec) Show(path, pathEnv string) {
	for _, d := range filepath.SplitList(pathEnv) {
		s.show(filepath.Clean(d))
	}
	progs := []string{path}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		progs = append(progs, real)
	}
	for _, p := range progs {
		d := filepath.Dir(p)
		if pkg, _, ok := strings.Cut(p, "/node_modules/"); ok && filepath.IsAbs(pkg) && !s.holdsHidden(pkg) {
			s.show(pkg) // an npm prefix: the program beside its packages
		} else if filepath.Base(d) == "bin" && !s.holdsHidden(filepath.Dir(d)) {
			s.show(filepath.Dir(d)) // a tree: bin/prog beside its lib/
		} else if !s.Visible(d) {
			s.show(p)
		}
	}
}

func (s *Spec) show(d string) {
	if d == "" || !filepath.IsAbs(d) || s.Visible(d) || s.holdsHidden(d) {
		return
	}
	for _, v := range s.Shown {
		if under(d, v) {
			return
		}
	}
	s.Shown = append(s.Shown, d)
}

// Visible reports whether d is shown anyway: the system's directories,
// the workspace, the home, the extra paths (and not in a hidden part of
// the workspace).
func (s *Spec) Visible(d string) bool {
	for _, list := range [][]string{System, {s.Workdir, s.Home}, s.RO, s.RW} {
		for _, v := range list {
			if v != "" && under(d, v) && !slices.ContainsFunc(s.Hide, func(h string) bool { return under(d, h) }) {
				return true
			}
		}
	}
	return false
}

// holdsHidden reports whether showing d would show one of s.Hidden.
func (s *Spec) holdsHidden(d string) bool {
	for _, h := range s.Hidden {
		if h != "" && under(h, d) {
			return true
		}
	}
	return false
}

// InnerSession returns the host pid of the session bubblewrap made for
// the process whose outer bwrap is pid (--new-session): bwrap's one child,
// the PID namespace's init, leads it, and the program and its children
// are in its group. 0 when it is not (or no longer) there, or off Linux.
func InnerSession(pid int) int {
	p := strconv.Itoa(pid)
	b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// IsBwrap reports whether the process pid runs bubblewrap (its command's
// name), as a program under the exec shim does on an isolated host.
func IsBwrap(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(argv0)) == "bwrap"
}
