package ssh

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outposthq/outpost/providers/tunnel"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Tunnel carries connections made to a loopback address of the remote
// host back to this one over the lease's own SSH connection: remote port
// forwarding (tcpip-forward) bound to the host's 127.0.0.1, a port no
// other machine can reach (processes of other users of that host can: a
// credential gateway behind it must check its token; and sshd's
// GatewayPorts yes would bind it on every address). A server that
// refuses forwarding (sshd's AllowTcpForwarding no or remote, a
// restricted key) gets the exec tunnel instead (providers/tunnel: outpost's
// binary on the host, multiplexing over an exec's stdin and stdout); an
// error names both causes when neither works. It implements
// driver.Tunneler. The lease's Close ends every tunnel it made.
func (s *Sandbox) Tunnel(ctx context.Context) (string, net.Listener, error) {
	if s.closing.Load() {
		return "", nil, fmt.Errorf("ssh: tunnel: %w", driver.ErrClosed)
	}
	c := s.c
	if c.dead() {
		return "", nil, fmt.Errorf("ssh: tunnel: %w", driver.ErrDisconnected)
	}
	if s.iso != nil && !s.iso.spec.Net {
		return s.sockTunnel(ctx, c)
	}
	ln, err := listen(ctx, func() (net.Listener, error) { return c.client.Listen("tcp", "127.0.0.1:0") })
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, err
		}
		addr, l, err2 := tunnel.Open(ctx, s, c.remote.binary, s.closing.Load)
		if err2 != nil {
			return "", nil, fmt.Errorf("ssh: the server refused remote port forwarding (%v), and the exec tunnel failed: %w", err, err2)
		}
		return addr, l, nil
	}
	f := &forward{Listener: ln, s: s, c: c}
	if !s.tunnels.add(f) { // Close has begun meanwhile
		ln.Close()
		return "", nil, fmt.Errorf("ssh: tunnel: %w", driver.ErrClosed)
	}
	return ln.Addr().String(), f, nil
}

// listen runs a forwarding request (open, which waits for the server's
// answer) until ctx ends: then it returns ctx's error, and a listener the
// server grants later is closed.
func listen(ctx context.Context, open func() (net.Listener, error)) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ln, err := open()
		ch <- result{ln, err}
	}()
	select {
	case r := <-ch:
		return r.ln, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.ln != nil {
				r.ln.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// forward is a remote port forward of the lease's connection.
type forward struct {
	net.Listener
	s      *Sandbox
	c      *conn
	closed atomic.Bool // Close was called
}

// Accept waits for the next connection made to the forwarded address.
// Once the forward ended: net.ErrClosed after Close, driver.ErrClosed
// after the lease's release, driver.ErrDisconnected when the connection
// dropped.
func (f *forward) Accept() (net.Conn, error) {
	return driver.TunnelAccept("ssh: tunnel", f.Listener.Accept, f.closed.Load, f.ended)
}

// ended is why the forward's Accept failed with err, Close not called.
func (f *forward) ended(err error) error {
	if f.s.closing.Load() {
		return fmt.Errorf("ssh: tunnel: %w: %w", driver.ErrClosed, err)
	}
	select { // the connection's end is marked once its Wait returns
	case <-f.c.done:
		return fmt.Errorf("ssh: tunnel: %w: %w", driver.ErrDisconnected, err)
	case <-time.After(time.Second):
	}
	return fmt.Errorf("ssh: tunnel: %w", err)
}

// Close cancels the forward.
func (f *forward) Close() error {
	f.closed.Store(true)
	f.s.tunnels.remove(f)
	return f.Listener.Close()
}

// tunnels are a lease's forwards, closed with it.
type tunnels struct {
	mu   sync.Mutex
	done bool
	set  map[*forward]bool
}

func (t *tunnels) add(f *forward) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return false
	}
	if t.set == nil {
		t.set = map[*forward]bool{}
	}
	t.set[f] = true
	return true
}

func (t *tunnels) remove(f *forward) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.set, f)
}

// closeAll ends every forward; later adds fail.
func (t *tunnels) closeAll() {
	t.mu.Lock()
	fs := t.set
	t.set, t.done = nil, true
	t.mu.Unlock()
	for f := range fs {
		_ = f.Listener.Close()
	}
}
