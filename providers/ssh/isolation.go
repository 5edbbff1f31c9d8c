package ssh

import (
	"context"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Isolation on an ssh host is the local provider's (internal/isolate),
// run by outpost's binary on the host: the exec shim wraps every program
// of a lease in bubblewrap, which the host must have and let make user,
// PID and network namespaces. The provider probes that once per
// connection (the shim's bwrap-probe mode, isolate.Probe on the host);
// isolation=auto runs the leases without it, with a degraded notice, when
// the probe fails, and isolation=namespaces refuses to connect. A lease
// whose egress is the gateway has loopback only: its tunnels are Unix
// sockets in its run directory, forwarded over the connection
// (streamlocal-forward@openssh.com, which sshd allows unless
// AllowStreamLocalForwarding says no) and bound into every process, where
// the shim's forward mode listens on loopback.

// probeIsolation settles the host's isolation for mode on c (after
// prepare learned the host): r.bwrap is bubblewrap's path when it works,
// r.noIso why not. isolation=namespaces that cannot be had is a
// configuration error.
func (p *Provider) probeIsolation(ctx context.Context, c *conn, r *remote) error {
	if p.opts.Isolation == isolate.None {
		return nil
	}
	res, err := run(ctx, c, command(shim.ProbeArgs(r.binary, p.opts.Bwrap)...), nil)
	if err != nil {
		return fmt.Errorf("ssh: probing bubblewrap on the host: %w", err)
	}
	switch res.code {
	case 0:
		r.bwrap = strings.TrimSpace(string(res.stdout))
		return nil
	case 1:
		r.noIso = strings.TrimSpace(string(res.stderr))
	default:
		r.noIso = fmt.Sprintf("the probe exited %d: %s", res.code, strings.TrimSpace(string(res.stderr)))
	}
	if p.opts.Isolation == isolate.Namespaces {
		return configErr(isolate.ErrUnavailable, "ssh: isolation=namespaces on %s: %s", p.Address(), r.noIso)
	}
	return nil
}

// isolationState is the provider's isolation as far as it is known: the
// setting, and for auto the connected host's (connecting, within the
// start timeout, when there is no connection yet; a host that cannot be
// reached counts as not isolated, and its leases fail to open anyway).
func (p *Provider) isolationState() (active bool, why string) {
	switch p.opts.Isolation {
	case isolate.None:
		return false, ""
	case isolate.Namespaces:
		return true, ""
	}
	// A host that could not be reached is not dialled again for each
	// question within the start timeout (a turn asks more than once
	// before its lease fails with the connection's error).
	p.isoMu.Lock()
	failed, why := p.isoFailed, p.isoWhy
	p.isoMu.Unlock()
	if !failed.IsZero() && time.Since(failed) < p.opts.StartTimeout {
		return false, why
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.StartTimeout)
	defer cancel()
	c, err := p.connect(ctx)
	if err != nil {
		p.isoMu.Lock()
		p.isoFailed, p.isoWhy = time.Now(), err.Error()
		p.isoMu.Unlock()
		return false, err.Error()
	}
	return c.remote.bwrap != "", c.remote.noIso
}

// IsolationNote implements driver.IsolationNoter: why isolation=auto
// runs the leases on the host without namespaces, "" otherwise.
func (p *Provider) IsolationNote() string {
	if p.opts.Isolation != isolate.Auto {
		return ""
	}
	if active, why := p.isolationState(); !active && why != "" {
		return "NOT ISOLATED: isolation=auto runs the leases on the ssh host as its user: " + why
	}
	return ""
}

// isolated is what a lease's processes see on the host.
type isolated struct {
	bwrap string
	spec  isolate.Spec // without Forwards, filled in per process

	mu       sync.Mutex
	forwards map[*sockForward]isolate.Forward
	next     int
}

// newIsolated is the isolation of lease s on host r.
func (s *Sandbox) newIsolated(r remote, egress driver.Egress) *isolated {
	spec := isolate.Spec{
		Home: s.Home(), Workdir: s.Workdir(),
		// the lease's TMPDIR and the bootstrap trees mirrored on the host
		// (content-addressed: public packages, the same for every lease)
		RW: []string{path.Join(s.dir, "tmp")}, RO: []string{path.Join(r.root, "trees")},
		Hide:   []string{path.Join(s.Workdir(), ".outpost")},
		Hidden: []string{r.home, r.root, "/"},
		Net:    egress != driver.EgressGateway,
	}
	return &isolated{bwrap: r.bwrap, spec: spec, forwards: map[*sockForward]isolate.Forward{}}
}

// arg is the exec shim's --isolate argument for a process started now:
// the tunnels open now are forwarded into it.
func (i *isolated) arg() string {
	spec := i.spec
	i.mu.Lock()
	for _, f := range i.forwards {
		spec.Forwards = append(spec.Forwards, f)
	}
	i.mu.Unlock()
	slices.SortFunc(spec.Forwards, func(a, b isolate.Forward) int { return strings.Compare(a.Addr, b.Addr) })
	return shim.IsolateArg(shim.Isolation{Bwrap: i.bwrap, Spec: spec})
}

// sockTunnel opens a tunnel of an isolated lease with a cut network: a
// Unix socket in the lease's run directory on the host, forwarded over
// the connection, reached from 127.0.0.1:<port> inside every process
// started from now on.
func (s *Sandbox) sockTunnel(ctx context.Context, c *conn) (string, net.Listener, error) {
	i := s.iso
	i.mu.Lock()
	n := i.next
	i.next++
	i.mu.Unlock()
	sock := path.Join(s.runDir, fmt.Sprintf("gateway-%d.sock", n))
	if len(sock) > isolate.MaxSocketPath {
		return "", nil, fmt.Errorf("ssh: tunnel: the socket path %s on the host is too long for a Unix socket (set a shorter root)", sock)
	}
	ln, err := listen(ctx, func() (net.Listener, error) { return c.client.ListenUnix(sock) })
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("ssh: tunnel: the server refused Unix-socket forwarding (sshd's AllowStreamLocalForwarding?), which an isolated lease with egress gateway needs: %w", err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: isolate.TunnelPort + n}
	f := &sockForward{forward: &forward{Listener: ln, s: s, c: c}, addr: addr, iso: i}
	if !s.tunnels.add(f.forward) {
		ln.Close()
		return "", nil, fmt.Errorf("ssh: tunnel: %w", driver.ErrClosed)
	}
	i.mu.Lock()
	i.forwards[f] = isolate.Forward{Addr: addr.String(), Socket: sock}
	i.mu.Unlock()
	return addr.String(), f, nil
}

// sockForward is a tunnel's host side: a forwarded Unix socket whose Addr
// is the loopback address processes dial inside.
type sockForward struct {
	*forward
	addr net.Addr
	iso  *isolated
}

func (f *sockForward) Addr() net.Addr { return f.addr }

func (f *sockForward) Close() error {
	f.iso.mu.Lock()
	delete(f.iso.forwards, f)
	f.iso.mu.Unlock()
	return f.forward.Close()
}

// Degraded implements driver.Degrader: a lease of isolation=auto on a
// host where bubblewrap is missing or refused runs as the host's user.
func (s *Sandbox) Degraded() error {
	if s.iso != nil || s.p.opts.Isolation != isolate.Auto || s.c.remote.noIso == "" {
		return nil
	}
	return fmt.Errorf("NOT ISOLATED: isolation=auto runs this lease on the ssh host without namespaces (it reads what the host's user can read; egress unenforced): %s", s.c.remote.noIso)
}
