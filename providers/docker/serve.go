package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/yamux"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The container's init serves the lease's processes (shim's serve.go):
// the provider attaches to the container's standard streams before it
// starts it, as `docker run` does, and runs a yamux client over them.
// Every process (Start, a helper, a spare) is then a stream opened on that
// connection instead of an exec (create, attach, inspect: three requests,
// and the engine's own work, about 100 ms each on a quiet machine). What
// is started is the exec shim, as over an exec, so the handshake, process
// groups, signals and statuses do not change. When the init does not
// serve (a `binary` of an older outpost: no hello within serveWait), or
// its connection is gone (the container stopped), every process falls
// back to an exec.

// serveWait bounds the wait for the init's hello after the start.
var serveWait = 10 * time.Second

// served is the connection to the container's init.
type served struct {
	*shim.Serving
	attach types.HijackedResponse
	stderr shim.Limited // the init's stderr, for diagnostics
}

// close ends the connection (the lease is released).
func (m *served) close() {
	m.Finish(nil, shim.ErrReleased)
	// The attach first: the session's Close waits for its reader to end.
	if m.attach.Conn != nil {
		m.attach.Close()
	}
	if sess := m.Session(); sess != nil {
		_ = sess.Close()
	}
}

// attachInit attaches to the created container's streams. It never fails
// the lease: without the attach, processes use execs.
func (s *Sandbox) attachInit(ctx context.Context) {
	if s.p.serveOff {
		return
	}
	m := &served{Serving: shim.NewServing(), stderr: shim.Limited{N: 4 << 10}}
	resp, err := s.eng.cli.ContainerAttach(ctx, s.cid, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		m.Finish(nil, fmt.Errorf("attaching: %w", err))
	} else {
		m.attach = resp
	}
	s.serve = m
}

// handshake reads the init's hello once the container runs, and starts
// the yamux client.
func (m *served) handshake() {
	if m.attach.Conn == nil {
		return
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, &m.stderr, m.attach.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	sess, err := shim.ServeClient(bufio.NewReaderSize(pr, 64<<10), m.attach.Conn, m.attach.CloseWrite)
	if err != nil {
		m.Finish(nil, fmt.Errorf("no hello from the init (%v): %s", err, m.stderr.String()))
		pr.CloseWithError(io.ErrClosedPipe)
		return
	}
	if !m.Finish(sess, nil) {
		_ = sess.Close()
	}
}

// Degraded reports why the container's init does not serve the lease's
// processes, so that each is an exec of its own (slower); nil while it
// serves, while its hello is awaited, or when serving is off by the
// provider's choice. It implements driver.Degrader.
func (s *Sandbox) Degraded() error {
	if s.serve == nil {
		return nil
	}
	if err := s.serve.Failed(); err != nil {
		return fmt.Errorf("docker: the init of %s does not serve its processes (%w); each is an exec of its own, which is slower", s.id, err)
	}
	return nil
}

// session returns the init's connection once it is ready, nil when there
// is none (then the caller uses an exec).
func (s *Sandbox) session(ctx context.Context) *yamux.Session {
	m := s.serve
	if m == nil {
		return nil
	}
	select {
	case <-m.Ready():
	default:
		t := time.NewTimer(serveWait)
		defer t.Stop()
		select {
		case <-m.Ready():
		case <-t.C:
			m.Finish(nil, fmt.Errorf("no hello from the init within %v", serveWait))
		case <-ctx.Done():
			return nil
		}
	}
	if sess := m.Session(); sess != nil && !sess.IsClosed() {
		return sess
	}
	return nil
}

// openServed opens a stream to the init and sends it the request to run
// args with env added to the container's environment. nil means there is
// no connection, or the request could not be sent: nothing runs.
func (s *Sandbox) openServed(ctx context.Context, args, env []string) *yamux.Stream {
	sess := s.session(ctx)
	if sess == nil {
		return nil
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil
	}
	unblock := context.AfterFunc(ctx, func() { _ = st.SetWriteDeadline(time.Unix(1, 0)) })
	_, err = st.Write(shim.ServeLine(args, env))
	unblock()
	if err != nil {
		_ = st.Close()
		return nil
	}
	return st
}

// streamConn is a served stream as the connection of a spare: Close and
// CloseWrite both end the provider's side (yamux's close is a half-close:
// what the process still writes is read, and discarded once nobody
// wants it).
type streamConn struct{ *yamux.Stream }

func (c streamConn) CloseWrite() error { return c.Stream.Close() }

// servedSpare makes a spare on the init's connection, now: a stream whose
// spare exec shim has said it is ready. nil when there is no connection
// or the spare did not start (the caller uses an exec).
func (s *Sandbox) servedSpare(ctx context.Context) *spare {
	sp := &spare{token: shim.Token(), made: make(chan struct{}), now: true}
	if !s.makeServed(ctx, sp) {
		return nil
	}
	close(sp.made)
	return sp
}

// makeServed makes sp on the init's connection, and reports whether it
// did (then sp's conn is set).
func (s *Sandbox) makeServed(ctx context.Context, sp *spare) bool {
	st := s.openServed(ctx, shim.SpareExecArgs(layout.BinaryPath, sp.token, layout.RunDir), nil)
	if st == nil {
		return false
	}
	resp := types.HijackedResponse{Conn: streamConn{st}, Reader: bufio.NewReaderSize(st, 32<<10)}
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Unix(1, 0)) })
	err := readReady(resp.Reader)
	if !stop() || err != nil {
		_ = st.Close()
		return false
	}
	_ = st.SetReadDeadline(time.Time{})
	sp.conn, sp.served = resp, true
	return true
}

// runServed is runLimit on the init's connection; ok is false when there
// is none (nothing ran).
func (s *Sandbox) runServed(ctx context.Context, cmd, env []string, max int) (res result, ok bool, err error) {
	st := s.openServed(ctx, cmd, env)
	if st == nil {
		return result{}, false, nil
	}
	_ = st.Close() // no stdin
	out, errb := &shim.Limited{N: max}, &shim.Limited{N: 1 << 20}
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Unix(1, 0)) })
	code, exited, err := shim.ReadFrames(bufio.NewReaderSize(st, 32<<10), out, errb)
	if !stop() {
		return result{}, true, ctx.Err()
	}
	if !exited {
		return result{}, true, s.execErr(ctx, cmd[len(cmd)-1], fmt.Errorf("the connection to the sandbox's init broke: %w", err))
	}
	return result{code: code, stdout: out.Bytes(), stderr: errb.Bytes()}, true, nil
}

// servedStream is the shim.Transport of a process on a served stream: its
// frames carry the exit status, so no exec is inspected.
type servedStream struct {
	execStream
	code   int
	exited bool
	err    error
}

func (t *servedStream) Stream(stdout, stderr io.Writer) error {
	t.code, t.exited, t.err = shim.ReadFrames(t.conn.Reader, stdout, stderr)
	if t.exited || errors.Is(t.err, io.ErrUnexpectedEOF) {
		// An end without a status (the container stopped) is Exit's to
		// explain, as an exec's stream that ends is.
		return nil
	}
	return t.err
}

// Exit is the status the init sent; without one, the sandbox was
// released, vanished, or the connection broke.
func (t *servedStream) Exit() (harness.ExitStatus, error) {
	switch {
	case t.exited:
		return harness.ExitStatus{Code: t.code}, nil
	case t.s.closing.Load():
		return shim.Killed, nil
	case t.s.Vanished(context.Background()):
		return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: %w: %s", driver.ErrVanished, t.s.id)
	}
	return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: waiting for a process of %s: the connection to its init broke: %v", t.s.id, t.err)
}
