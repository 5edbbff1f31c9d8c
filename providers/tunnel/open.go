// Package tunnel carries TCP connections made inside a sandbox back to the
// host over one of the lease's own exec streams: no port, socket or
// network is opened to anyone else, and it works wherever the provider can
// start a process with a standard input (docker, kubernetes, ssh), the
// sandbox's network cut off or not.
//
// The sandbox's side is a mode of the in-sandbox binary (`outpost-sandbox
// sandbox-shim tunnel`, package inside): it listens on 127.0.0.1:0 inside
// the sandbox, writes the address it got on its first line of stdout,
// then multiplexes every connection it accepts over its stdin and stdout
// with yamux, one stream per connection. The host's side (Open) starts it
// through the lease's driver.Sandbox.Start, reads the address, and
// returns a net.Listener whose Accept yields those streams: it implements
// driver.Tunneler for the providers that run the in-sandbox binary.
//
// `sandbox-shim dial ADDR` (inside.Dial) is a small client for tests: it
// copies its stdin to a connection to ADDR and the connection to its
// stdout, so a test needs no curl or nc in the sandbox's image.
package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tunnel/inside"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Args are the arguments of the in-sandbox binary that run inside.Serve.
func Args() []string { return []string{"sandbox-shim", inside.Mode} }

// DialArgs are the arguments of the in-sandbox binary that run
// inside.Dial.
func DialArgs(addr string) []string { return []string{"sandbox-shim", inside.DialMode, addr} }

// stopGrace is how long the tunnel's process has to end after its stdin
// closed, before it is killed.
const stopGrace = 5 * time.Second

// Open starts the sandbox's side of a tunnel in sb (binary is the
// in-sandbox binary's path there) and returns the address processes in
// sb dial and the host's listener of their connections. released reports
// whether sb is being released (then the tunnel's end is the sandbox's,
// and Accept's error wraps driver.ErrClosed). ctx bounds only the start.
//
// The listener's Accept returns net.ErrClosed once Close was called;
// when the tunnel ended otherwise, an error saying why: wrapping
// driver.ErrClosed (the sandbox was released), the driver's error of a
// sandbox that went away (driver.ErrVanished, driver.ErrDisconnected), or
// the exit of the tunnel's process and what it wrote on stderr.
func Open(ctx context.Context, sb driver.Sandbox, binary string, released func() bool) (string, net.Listener, error) {
	if released() {
		return "", nil, fmt.Errorf("tunnel: %w", driver.ErrClosed)
	}
	env := map[string]string{}
	for k, v := range sb.Environment().Defaults {
		env[k] = v
	}
	for k, v := range sb.Environment().Fixed {
		env[k] = v
	}
	p, err := sb.Start(ctx, driver.ExecRequest{Path: binary, Args: Args(), Env: env, Stdin: true})
	if err != nil {
		return "", nil, fmt.Errorf("tunnel: starting its end in %s: %w", sb.ID(), err)
	}
	l := &listener{p: p, sb: sb, released: released, stderr: shim.Limited{N: 4 << 10}, readDone: make(chan struct{}), stderrDone: make(chan struct{}), done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(&l.stderr, p.Stderr())
		close(l.stderrDone)
	}()
	out := bufio.NewReader(&signalReader{r: p.Stdout(), done: l.readDone})
	addr, err := readAddr(ctx, out)
	if err != nil {
		if ctx.Err() != nil {
			l.stop()
			return "", nil, ctx.Err()
		}
		l.abort(out)
		return "", nil, l.failed(fmt.Errorf("tunnel: reading the address of its end in %s: %w", sb.ID(), err))
	}
	l.addr = addr
	// The host's side accepts the streams the sandbox's side opens.
	sess, err := yamux.Server(inside.Stdio{Reader: out, Writer: p.Stdin(), CloseFunc: l.closeStdin}, inside.Config())
	if err != nil { // only for an invalid configuration
		l.stop()
		return "", nil, err
	}
	l.sess = sess
	go l.watch()
	return addr.String(), l, nil
}

// readAddr reads the first line of the tunnel's stdout: the address it
// listens on, a loopback TCP address.
func readAddr(ctx context.Context, out *bufio.Reader) (*net.TCPAddr, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := out.ReadString('\n')
		ch <- result{line, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	a, err := net.ResolveTCPAddr("tcp", strings.TrimSpace(r.line))
	if err != nil || !a.IP.IsLoopback() || a.Port == 0 {
		return nil, fmt.Errorf("not a loopback address: %q", r.line)
	}
	return a, nil
}

// listener is the host's side of one tunnel.
type listener struct {
	p        driver.Process
	sb       driver.Sandbox
	released func() bool
	addr     *net.TCPAddr
	sess     *yamux.Session
	stderr   shim.Limited // read once stderrDone is closed

	closed     atomic.Bool   // Close was called
	readDone   chan struct{} // closed once the tunnel's stdout ended
	stderrDone chan struct{} // closed once its stderr ended
	stopOnce   sync.Once
	done       chan struct{} // closed once the process ended; err is set
	err        error         // why the tunnel ended, when not by Close
	closeOnce  sync.Once
}

// Accept waits for the next connection made to the tunnel's address in
// the sandbox.
func (l *listener) Accept() (net.Conn, error) {
	return driver.TunnelAccept("tunnel", l.sess.Accept, l.closed.Load, func(error) error {
		<-l.done // the process ended: l.err says why
		return l.err
	})
}

// Close ends the tunnel: its process in the sandbox ends (killed when it
// does not within a few seconds), and so does every connection it
// carried. It returns once the process has ended.
func (l *listener) Close() error {
	l.closed.Store(true)
	l.closeOnce.Do(func() { _ = l.sess.Close() })
	<-l.done
	return nil
}

// Addr is the tunnel's address in the sandbox (a loopback address there,
// not on the host).
func (l *listener) Addr() net.Addr { return l.addr }

// closeStdin is the session's Close of its connection: it ends the
// process's stdin, so that the sandbox's side ends, and kills the process
// if it has not ended within stopGrace.
func (l *listener) closeStdin() error {
	err := l.p.Stdin().Close()
	go func() {
		select {
		case <-l.readDone:
		case <-time.After(stopGrace):
			l.stop()
		}
	}()
	return err
}

// abort ends a tunnel whose start failed: its process gets stopGrace to
// end once its stdin is closed, then is killed; what it wrote on stderr
// is kept for the error.
func (l *listener) abort(out io.Reader) {
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_ = l.p.Stdin().Close()
	ended := make(chan struct{})
	go func() {
		<-l.stderrDone
		_, _ = l.p.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(stopGrace):
	}
	l.stop()
}

// stop kills the tunnel's process and releases its streams.
func (l *listener) stop() {
	l.stopOnce.Do(func() {
		_ = l.p.Signal(driver.Kill)
		_ = l.p.Close()
	})
}

// watch waits for the session to end (Close, the process's end, a broken
// stream), then for the process, and records why the tunnel ended.
func (l *listener) watch() {
	<-l.sess.CloseChan()
	l.closeOnce.Do(func() { _ = l.sess.Close() })
	<-l.readDone
	st, err := l.p.Wait()
	if err != nil && !l.released() {
		// The exec stream is lost, not necessarily the process: it must
		// not go on listening in the sandbox once the tunnel has ended.
		_ = l.p.Signal(driver.Kill)
	}
	select { // its last words, once its stderr ends too
	case <-l.stderrDone:
	case <-time.After(time.Second):
	}
	_ = l.p.Close()
	l.err = l.failed(ended(st, err))
	close(l.done)
}

// ended says how the tunnel's process ended.
func ended(st harness.ExitStatus, err error) error {
	if err != nil {
		return fmt.Errorf("tunnel: its end in the sandbox is lost: %w", err)
	}
	if st.Signal != "" {
		return fmt.Errorf("tunnel: its end in the sandbox was killed (%s)", st.Signal)
	}
	return fmt.Errorf("tunnel: its end in the sandbox exited with status %d", st.Code)
}

// failed adds to err what the sandbox says: released (driver.ErrClosed),
// gone (driver.ErrVanished where err does not already say so), and the
// tunnel's last words on stderr.
func (l *listener) failed(err error) error {
	select {
	case <-l.stderrDone:
		if msg := l.stderr.String(); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
	default: // still being written: not read
	}
	switch {
	case l.released():
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case errors.Is(err, driver.ErrVanished) || errors.Is(err, driver.ErrDisconnected):
		return err
	}
	if v, ok := l.sb.(driver.Vanisher); ok && vanishedSoon(v) {
		return fmt.Errorf("%w: %w", driver.ErrVanished, err)
	}
	return err
}

// vanishWindow is how long a tunnel that ended unexplained looks for its
// sandbox's removal: an engine removing a container kills its processes
// (the tunnel ends with status 137) a moment before it stops reporting
// the container as running.
const vanishWindow = 2 * time.Second

// vanishedSoon reports whether v's sandbox is gone, or is gone within
// vanishWindow.
func vanishedSoon(v driver.Vanisher) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	delay, waited := 20*time.Millisecond, time.Duration(0)
	for !v.Vanished(ctx) {
		if waited >= vanishWindow {
			return false
		}
		time.Sleep(delay)
		waited += delay
		delay = min(2*delay, 400*time.Millisecond)
	}
	return true
}

// signalReader closes done once r's reads end.
type signalReader struct {
	r    io.Reader
	done chan struct{}
	once sync.Once
}

func (s *signalReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil {
		s.once.Do(func() { close(s.done) })
	}
	return n, err
}
