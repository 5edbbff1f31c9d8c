package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/tunnel/inside"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Isolation is how the provider's leases are isolated: settled once per
// provider (the probe of bwrap runs once per process).
type Isolation struct {
	// Mode is the setting: auto, namespaces or none.
	Mode string `json:"mode"`
	// Active: the leases run in namespaces of their own (bubblewrap).
	Active bool `json:"active"`
	// Bwrap is the bubblewrap used, when Active.
	Bwrap string `json:"bwrap,omitempty"`
	// Reason says why auto fell back to none (bwrap missing or refused).
	Reason string `json:"reason,omitempty"`
}

// isolation settles p's isolation: an error (code configuration) when
// namespaces were asked for and cannot be had.
func (p *Provider) isolation() (Isolation, error) {
	p.isoOnce.Do(func() {
		iso := Isolation{Mode: p.mode}
		if iso.Mode == "" {
			iso.Mode = isolate.Auto
		}
		switch {
		case iso.Mode == isolate.None:
		case iso.Mode == isolate.Auto && runtime.GOOS != "linux":
			iso.Reason = "namespaces are Linux's"
		default:
			bw, err := isolate.Probe(p.bwrap)
			if err != nil && iso.Mode == isolate.Namespaces {
				p.isoErr = Settings.Invalid("isolation", iso.Mode, err)
			}
			if err != nil {
				iso.Reason = err.Error()
				break
			}
			iso.Active, iso.Bwrap = true, bw
		}
		p.iso = iso
	})
	return p.iso, p.isoErr
}

// Isolation reports how the provider's leases are isolated, and the
// configuration error of isolation=namespaces where it cannot be had.
func (p *Provider) Isolation() (Isolation, error) { return p.isolation() }

// checkExtra checks the ro and rw settings' paths.
func (p *Provider) checkExtra() error {
	home, _ := os.UserHomeDir()
	for name, paths := range map[string][]string{"ro": p.ro, "rw": p.rw} {
		if err := isolate.CheckPaths(paths, home, p.base); err != nil {
			return Settings.Invalid(name, strings.Join(paths, ","), err)
		}
	}
	return nil
}

// splitPaths reads a comma-separated list of paths.
func splitPaths(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// isolated is what a lease's processes see (isolate.Spec) and the tunnels
// they reach the host through.
type isolated struct {
	bwrap string
	spec  isolate.Spec // without Shown and Forwards, filled in per process
	shim  func(ctx context.Context) (string, error)

	mu       sync.Mutex
	forwards map[*sockListener]isolate.Forward
	next     int
	closed   bool
	sockDir  string // the sockets' directory when s.dir is too deep (shortDir)
}

// newIsolated is the isolation of a lease with this home and workspace.
func (p *Provider) newIsolated(iso Isolation, home, wd string, opts driver.Options) *isolated {
	userHome, _ := os.UserHomeDir()
	egress := opts.Egress
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	spec := isolate.Spec{Home: home, Workdir: wd, RO: slices.Clone(p.ro), RW: p.rw, Exists: exists,
		Net: egress != driver.EgressGateway, ForwardMode: inside.ForwardArgs()}
	// What of outpost's own is under the workspace stays out of sight:
	// .outpost (its .env) and the provider's directory of leases, from
	// any process started while they exist (Spec.Args).
	for _, d := range []string{filepath.Join(wd, ".outpost"), p.base} {
		if d != wd && isolate.Under(d, wd) {
			spec.Hide = append(spec.Hide, d)
		}
	}
	// The mounts asked for are shown read-only at their host paths
	// (HostPath answers the host path itself: Capabilities.Isolated is
	// false).
	for _, m := range opts.Mounts {
		if src := filepath.Clean(m.Source); filepath.IsAbs(src) && exists(src) && !isolate.Under(userHome, src) && !isolate.Under(p.base, src) {
			spec.RO = append(spec.RO, src)
		}
	}
	spec.Hidden = []string{userHome, p.base, "/"}
	return &isolated{bwrap: iso.Bwrap, spec: spec, shim: p.shim, forwards: map[*sockListener]isolate.Forward{}}
}

// args are bwrap's arguments for one process: the program's tree and the
// directories of its PATH shown read-only, the tunnels open now forwarded
// (by the forwarder, located anew when the one found before is gone: a
// cached build another outpost's build replaced).
func (i *isolated) args(ctx context.Context, path string, args []string, dir, pathEnv string) (argv []string, forwarding bool, err error) {
	spec := i.spec
	spec.Show(path, pathEnv)
	i.mu.Lock()
	for _, f := range i.forwards {
		spec.Forwards = append(spec.Forwards, f)
	}
	i.mu.Unlock()
	slices.SortFunc(spec.Forwards, func(a, b isolate.Forward) int { return strings.Compare(a.Addr, b.Addr) })
	if len(spec.Forwards) > 0 {
		shim, err := i.shim(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("the forwarder of an isolated lease: %w", err)
		}
		spec.Shim = shim
	}
	return spec.Args(path, args, dir), spec.Forwarding(), nil
}

// tunnel opens a Unix socket in the lease's directory, forwarded from a
// loopback address inside every process started from now on.
func (s *Sandbox) tunnel(ctx context.Context) (string, net.Listener, error) {
	i := s.iso
	if i.spec.Net {
		return "", nil, fmt.Errorf("the lease shares the host's network: %w", errors.ErrUnsupported)
	}
	if _, err := i.shim(ctx); err != nil { // found (or built) before any process needs it
		return "", nil, fmt.Errorf("the forwarder of an isolated lease: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return "", nil, fmt.Errorf("tunnel: %w", driver.ErrClosed)
	}
	n := i.next
	i.next++
	name := fmt.Sprintf("gateway-%d.sock", n)
	sock := filepath.Join(s.dir, name)
	if len(sock) > isolate.MaxSocketPath {
		dir, err := i.shortDir()
		if err != nil {
			return "", nil, fmt.Errorf("tunnel: the socket path %s is too long for a Unix socket, and a shorter directory: %w", sock, err)
		}
		sock = filepath.Join(dir, name)
	}
	ul, err := net.Listen("unix", sock)
	if err != nil {
		return "", nil, fmt.Errorf("tunnel: %w", err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: isolate.TunnelPort + n}
	l := &sockListener{Listener: ul, addr: addr, iso: i}
	i.forwards[l] = isolate.Forward{Addr: addr.String(), Socket: sock}
	return addr.String(), l, nil
}

// shortDir is a directory of the lease's own for its sockets when the
// lease's directory is too deep for one (a long root or TMPDIR): made
// once under the temporary directory, else /tmp; removed with the
// tunnels. The caller holds i.mu.
func (i *isolated) shortDir() (string, error) {
	if i.sockDir != "" {
		return i.sockDir, nil
	}
	var errs []error
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		if len(filepath.Join(parent, "outpost-sock-0123456789", "gateway-00.sock")) > isolate.MaxSocketPath {
			errs = append(errs, fmt.Errorf("%s is too deep", parent))
			continue
		}
		d, err := os.MkdirTemp(parent, "outpost-sock-")
		if err == nil {
			i.sockDir = d
			return d, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// closeTunnels ends the lease's tunnels (its release).
func (i *isolated) closeTunnels() {
	i.mu.Lock()
	i.closed = true
	ls := make([]*sockListener, 0, len(i.forwards))
	for l := range i.forwards {
		ls = append(ls, l)
	}
	dir := i.sockDir
	i.mu.Unlock()
	for _, l := range ls {
		l.released.Store(true)
		_ = l.Close()
	}
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// sockListener is a tunnel's host side: a Unix socket whose Addr is the
// loopback address processes dial inside.
type sockListener struct {
	net.Listener
	addr     net.Addr
	iso      *isolated
	closed   atomic.Bool
	released atomic.Bool
}

func (l *sockListener) Addr() net.Addr { return l.addr }

func (l *sockListener) Accept() (net.Conn, error) {
	return driver.TunnelAccept("tunnel", l.Listener.Accept, func() bool { return l.closed.Load() && !l.released.Load() }, func(err error) error {
		if l.released.Load() {
			return fmt.Errorf("tunnel: %w", driver.ErrClosed)
		}
		return err
	})
}

func (l *sockListener) Close() error {
	if !l.released.Load() {
		l.closed.Store(true)
	}
	l.iso.mu.Lock()
	delete(l.iso.forwards, l)
	l.iso.mu.Unlock()
	return l.Listener.Close()
}

// shim is the in-sandbox binary that forwards the tunnels, once per
// provider: outpost-sandbox beside the running executable, as a release
// installs it (selfbin.HostAgent); else the running executable when it is
// outpost's CLI or in-sandbox binary (both have the forward mode; static
// or not, as the lease sees the host's libraries); else the one selfbin
// locates or builds (a library caller, a test). A CLI built from a
// checkout with a fresh HOME used to build one with a cold Go cache. The
// small binary comes first because every process of an isolated lease
// starts one: a start of the 48 MB CLI costs about 80 ms of CPU (its
// packages' initializers and page faults), one of outpost-sandbox about
// 10 ms.
func (p *Provider) shim(ctx context.Context) (string, error) {
	p.shimMu.Lock()
	defer p.shimMu.Unlock()
	if p.shimPath != "" {
		if _, err := os.Stat(p.shimPath); err == nil {
			return p.shimPath, nil
		}
	}
	b, err := selfShim()
	if h, ok := selfbin.HostAgent(); ok {
		b, err = h, nil
	}
	if err != nil {
		b, err = selfbin.LocateOrBuild(ctx, "")
	}
	if err != nil {
		return "", err
	}
	p.shimPath = b
	return b, nil
}

// tunnelSandbox is an isolated lease with a cut network: a
// driver.Tunneler, its tunnels forwarded into every process.
type tunnelSandbox struct{ *Sandbox }

// Tunnel implements driver.Tunneler.
func (t tunnelSandbox) Tunnel(ctx context.Context) (string, net.Listener, error) {
	return t.tunnel(ctx)
}

// degradedSandbox is a lease that runs without isolation because auto
// found none: a driver.Degrader saying why.
type degradedSandbox struct {
	*Sandbox
	why error
}

// Degraded implements driver.Degrader.
func (d degradedSandbox) Degraded() error { return d.why }

// selfShim is the running executable when it is outpost's CLI or its
// in-sandbox binary.
func selfShim() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok || (bi.Path != selfbin.Module+"/cmd/outpost" && bi.Path != selfbin.Module+"/cmd/outpost-sandbox") {
		return "", errors.New("the running executable is not outpost's")
	}
	return os.Executable()
}
