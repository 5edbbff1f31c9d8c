// Package isolate builds the bubblewrap (bwrap) command line that runs a
// process of a sandbox on the host (local; ssh hosts later) in namespaces
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
	"strings"
	"sync"
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
	Home    string   // the lease's home: writable
	Workdir string   // the workspace: writable
	Hide    []string // directories under Workdir replaced by an empty tmpfs (.outpost)
	RO, RW  []string // extra paths, read-only and writable
	Shown   []string // more read-only paths (the program's tree, PATH's directories)
	Exists  func(string) bool
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
		a = append(a, "--tmpfs", h)
	}
	a = append(a, "--bind", s.Home, s.Home)
	for _, p := range s.RW {
		a = append(a, "--bind", p, p)
	}
	a = append(a, "--chdir", dir)
	if len(s.Forwards) > 0 && !s.Net {
		a = append(a, "--ro-bind", s.Shim, ShimPath)
		fw := append([]string{}, s.ForwardMode...)
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
