package tunnel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tunnel/inside"
	"github.com/outposthq/outpost/providers/tunnel"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// The in-memory sandbox runs the tunnel's sandbox side as a program of
// its own: its loopback is the host's, which lets these tests dial the
// tunnel's address as a process inside the sandbox would.

const binary = "/bin/outpost"

// outpost runs the sandbox side of a tunnel as the in-sandbox binary does.
func outpost(ctx context.Context, p *memsandbox.Proc) int {
	switch {
	case len(p.Args) == 2 && p.Args[1] == inside.Mode:
		return inside.Serve(p.Stdin, p.Stdout, p.Stderr)
	case len(p.Args) == 3 && p.Args[1] == inside.DialMode:
		return inside.Dial(p.Args[2], p.Stdin, p.Stdout, p.Stderr)
	}
	return 2
}

// garbage is a sandbox side that answers with no address.
func garbage(_ context.Context, p *memsandbox.Proc) int {
	fmt.Fprintln(p.Stdout, "not an address")
	fmt.Fprintln(p.Stderr, "something went wrong")
	return 3
}

type fixture struct {
	prov     *memsandbox.Provider
	sb       driver.Sandbox
	released atomic.Bool
}

func newFixture(t *testing.T, prog memsandbox.Program) *fixture {
	t.Helper()
	f := &fixture{prov: memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{binary: prog}})}
	sb, err := f.prov.Open(t.Context(), driver.Options{Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	f.sb = sb
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return f
}

func (f *fixture) open(t *testing.T) (string, net.Listener) {
	t.Helper()
	addr, l, err := tunnel.Open(t.Context(), f.sb, binary, f.released.Load)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return addr, l
}

// echoServe answers every connection l accepts with what it reads,
// upper-cased by nothing: bytes back as they came, until l ends.
func echoServe(l net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				done <- err
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	return done
}

// roundTrip sends msg through a connection to addr, ends its writing,
// and returns everything read back.
func roundTrip(addr string, msg []byte) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		_ = c.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		return got, werr
	}
	return got, err
}

// TestTunnel: connections to the address reach the host's listener, many
// at once, bytes flowing both ways; Close ends Accept with net.ErrClosed
// and the address stops taking connections.
func TestTunnel(t *testing.T) {
	f := newFixture(t, outpost)
	addr, l := f.open(t)
	if l.Addr().String() != addr {
		t.Errorf("Addr %v, Open said %s", l.Addr(), addr)
	}
	done := echoServe(l)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + i)}, 100_000+i)
			got, err := roundTrip(addr, msg)
			if err == nil && !bytes.Equal(got, msg) {
				err = fmt.Errorf("connection %d: got %d bytes back, want %d", i, len(got), len(msg))
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still takes connections after Close", addr)
	}
}

// TestTunnelEnds: a tunnel ended by its sandbox says why: released
// (driver.ErrClosed), vanished (driver.ErrVanished).
func TestTunnelEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(f *fixture) error
		want error
	}{
		{"released", func(f *fixture) error {
			f.released.Store(true)
			return f.sb.Close(context.Background())
		}, driver.ErrClosed},
		{"vanished", func(f *fixture) error { return f.prov.Remove(f.sb.ID()) }, driver.ErrVanished},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, outpost)
			_, l := f.open(t)
			done := echoServe(l)
			if err := tc.end(f); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, tc.want) {
				t.Errorf("Accept: %v, want %v", err, tc.want)
			}
		})
	}
}

// lateVanisher is a sandbox whose removal its engine reports only from the
// third look on, as Docker's does while it removes a container whose
// processes it has already killed.
type lateVanisher struct {
	driver.Sandbox
	looks atomic.Int32
}

func (v *lateVanisher) Vanished(context.Context) bool { return v.looks.Add(1) >= 3 }

// TestTunnelVanishesLate: a tunnel killed by its sandbox's removal (exit
// 137) says driver.ErrVanished even when the engine still reports the
// sandbox for a moment (providers/docker's TestTunnelVanished met it).
func TestTunnelVanishesLate(t *testing.T) {
	kill := make(chan struct{})
	f := newFixture(t, func(_ context.Context, p *memsandbox.Proc) int {
		go inside.Serve(p.Stdin, p.Stdout, p.Stderr)
		<-kill
		return 137
	})
	sb := &lateVanisher{Sandbox: f.sb}
	_, l, err := tunnel.Open(t.Context(), sb, binary, f.released.Load)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	done := echoServe(l)
	close(kill)
	if err := <-done; !errors.Is(err, driver.ErrVanished) {
		t.Errorf("Accept: %v, want driver.ErrVanished", err)
	}
	if n := sb.looks.Load(); n < 3 {
		t.Errorf("looked %d times, want until it vanished", n)
	}
}

// TestTunnelStartFails: a sandbox side that gives no address fails Open
// with what it said; a released sandbox gives driver.ErrClosed.
func TestTunnelStartFails(t *testing.T) {
	f := newFixture(t, garbage)
	_, _, err := tunnel.Open(t.Context(), f.sb, binary, f.released.Load)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("not a loopback address")) || !bytes.Contains([]byte(err.Error()), []byte("something went wrong")) {
		t.Errorf("Open: %v, want the bad address and the stderr", err)
	}
	f.released.Store(true)
	if _, _, err := tunnel.Open(t.Context(), f.sb, binary, f.released.Load); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Open on a released sandbox: %v, want driver.ErrClosed", err)
	}
}

// errLost is the error of an exec stream that broke.
var errLost = errors.New("the exec stream broke")

// lossySandbox starts processes whose exec stream the test can lose (a
// kubernetes exec's connection breaking): the host's side sees stdout end
// and Wait fail while the process goes on in the sandbox.
type lossySandbox struct {
	driver.Sandbox
	procs chan *lossyProcess
}

func (s *lossySandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	p, err := s.Sandbox.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	lp := &lossyProcess{Process: p, out: r, lost: make(chan struct{})}
	go func() { _, _ = io.Copy(w, p.Stdout()); _ = w.Close() }()
	lp.lose = func() { _ = w.CloseWithError(errLost); close(lp.lost) }
	s.procs <- lp
	return lp, nil
}

type lossyProcess struct {
	driver.Process
	out    *io.PipeReader
	lost   chan struct{}
	lose   func()
	killed atomic.Bool
}

func (p *lossyProcess) Stdout() io.Reader { return p.out }

func (p *lossyProcess) Wait() (harness.ExitStatus, error) {
	<-p.lost
	return harness.ExitStatus{Code: -1}, errLost
}

func (p *lossyProcess) Signal(s driver.Signal) error {
	if s == driver.Kill {
		p.killed.Store(true)
	}
	return p.Process.Signal(s)
}

// TestTunnelLostStreamKills: a tunnel whose exec stream broke ends, says
// so, and kills its process in the sandbox, which would otherwise go on
// accepting connections no one carries (kubernetes' conformance run met
// a connection accepted after Close).
func TestTunnelLostStreamKills(t *testing.T) {
	ended := make(chan struct{})
	f := newFixture(t, func(ctx context.Context, p *memsandbox.Proc) int {
		go inside.Serve(p.Stdin, p.Stdout, p.Stderr)
		<-ctx.Done() // a live stdin: only a signal ends it
		close(ended)
		return 137
	})
	sb := &lossySandbox{Sandbox: f.sb, procs: make(chan *lossyProcess, 1)}
	_, l, err := tunnel.Open(t.Context(), sb, binary, f.released.Load)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := <-sb.procs
	done := echoServe(l)
	p.lose()
	if err := <-done; err == nil || !errors.Is(err, errLost) {
		t.Errorf("Accept: %v, want the lost stream's error", err)
	}
	if !p.killed.Load() {
		t.Fatal("the tunnel's process was not killed once its stream was lost")
	}
	<-ended
}
