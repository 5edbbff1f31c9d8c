package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TunnelBinary is the program the tunnel tests run inside a sandbox as
// the client of a tunnel: outpost's in-sandbox binary, found on the
// sandbox's PATH as every provider that implements driver.Tunneler with
// it has it (`outpost sandbox-shim dial ADDR` copies its stdin to ADDR
// and ADDR to its stdout).
const TunnelBinary = "outpost"

// tunneler returns the lease's driver.Tunneler, or skips the test (fails
// it, under RunTunnelTests).
func (s *suite) tunneler(t *testing.T, l *sandbox.Lease) driver.Tunneler {
	t.Helper()
	tn, ok := l.Sandbox().(driver.Tunneler)
	switch {
	case !ok && s.mustTunnel:
		t.Fatalf("%T is no driver.Tunneler", l.Sandbox())
	case !ok:
		t.Skipf("%T is no driver.Tunneler", l.Sandbox())
	}
	return tn
}

// tunnelServe answers every connection l accepts with "host:" and what
// it read, until l ends; it counts the connections and sends Accept's
// last error on the channel.
func tunnelServe(l net.Listener, n *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				done <- err
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("host:"), b...))
			}()
		}
	}()
	return done
}

// dial runs the tunnel's client in l: msg goes to addr, the answer comes
// back.
func (s *suite) dial(ctx context.Context, l *sandbox.Lease, addr string, msg []byte) (sandbox.ExecResult, error) {
	p, err := l.Start(ctx, driver.ExecRequest{Path: TunnelBinary, Args: []string{"sandbox-shim", "dial", addr}, Env: baseEnv(l), Stdin: true})
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer p.Close()
	go func() {
		_, _ = p.Stdin().Write(msg)
		_ = p.Stdin().Close()
	}()
	var res sandbox.ExecResult
	errc := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(p.Stderr())
		errc <- b
	}()
	res.Stdout, _ = io.ReadAll(p.Stdout())
	res.Stderr = <-errc
	res.Status, err = p.Wait()
	return res, err
}

// testTunnel (driver.Tunneler): connections made in the sandbox to the
// tunnel's address reach the host's listener, several at once, bytes
// flowing both ways; closing the listener ends the tunnel (Accept says
// net.ErrClosed, the address takes no more connections); a second tunnel
// of the same lease is a tunnel of its own.
func (s *suite) testTunnel(t *testing.T) {
	l := s.lease(t)
	tn := s.tunneler(t, l)
	addr, ln, err := tn.Tunnel(t.Context())
	if err != nil {
		t.Fatalf("Tunnel: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("Tunnel's address %q is not on the loopback", addr)
	}
	var accepted atomic.Int64
	done := tunnelServe(ln, &accepted)
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			msg := []byte(strings.Repeat(fmt.Sprintf("conn%d ", i), 20_000))
			res, err := s.dial(t.Context(), l, addr, msg)
			switch {
			case err != nil:
				errs <- fmt.Errorf("dial %d: %w", i, err)
			case !res.Status.Success() || !bytes.Equal(res.Stdout, append([]byte("host:"), msg...)):
				errs <- fmt.Errorf("dial %d: status %+v, %d bytes back (want %d), stderr %q", i, res.Status, len(res.Stdout), len(msg)+5, trim(res.Stderr))
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := accepted.Load(); got != n {
		t.Errorf("the host accepted %d connections, want %d", got, n)
	}

	// A second tunnel lives beside the first and ends on its own.
	addr2, ln2, err := tn.Tunnel(t.Context())
	if err != nil {
		t.Fatalf("a second Tunnel: %v", err)
	}
	if addr2 == addr {
		t.Errorf("two tunnels share the address %s", addr)
	}
	if err := ln2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	if err := ln.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	for _, a := range []string{addr, addr2} {
		res, err := s.dial(t.Context(), l, a, []byte("late"))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if res.Status.Success() {
			t.Errorf("a connection to %s after Close: status %+v, stdout %q", a, res.Status, res.Stdout)
		}
	}
	if got := accepted.Load(); got != n {
		t.Errorf("the host accepted %d connections after Close, want %d", got-n, 0)
	}
}

// testTunnelEndsWithLease (driver.Tunneler): releasing the lease ends its
// tunnel: Accept returns an error wrapping driver.ErrClosed.
func (s *suite) testTunnelEndsWithLease(t *testing.T) {
	p := s.provider(t)
	l, err := sandbox.Acquire(t.Context(), p, s.h.Options(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	_, ln, err := s.tunneler(t, l).Tunnel(t.Context())
	if err != nil {
		t.Fatalf("Tunnel: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	done := tunnelServe(ln, &accepted)
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Accept after the lease's Close: %v, want driver.ErrClosed", err)
	}
}
