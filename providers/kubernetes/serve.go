package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
)

// One exec serves the lease's processes (shim's serve.go, ServeMode): the
// first process of a lease starts `outpost sandbox-shim serve` in the
// sandbox container, a long-lived exec whose stdin and stdout carry a
// yamux session, and every process after it (Start, a copy in or out, a
// signal, a lookup) is a stream of that session instead of an exec of its
// own: no SPDY or WebSocket upgrade through the API server and the
// kubelet, no runtime exec in the container. What a stream runs is the
// same command line an exec would (the exec shim and its helper modes),
// with the same stdin, so handshakes, process groups, signals and
// statuses do not change; its stdout and stderr come back in frames,
// and last its exit status.
//
// Not an attach to the init, as docker's provider does: the init's
// stdout is the container's log, which the kubelet keeps on the node,
// and every process's output (a workspace copied back included) would
// land there. An exec's streams are not logged.
//
// When the serving exec cannot start (no hello: an outpost binary in the
// pod without ServeMode), every process of the lease is an exec, as
// with Options.ExecEach. When its connection breaks later (the API
// server or the kubelet restarted, an idle limit of a proxy), the
// processes on it end as with a broken exec, and the next one starts a
// new serving exec.

// serveWait bounds the wait for the serving exec's hello (its exec's
// upgrade included).
var serveWait = 30 * time.Second

// served is one serving exec and its session.
type served struct {
	*shim.Serving
	cancel context.CancelFunc // ends the exec
	stderr shim.Limited       // the serving exec's stderr, for diagnostics
}

// close ends the session and its exec.
func (m *served) close() {
	m.Finish(nil, shim.ErrReleased)
	m.cancel()
	if sess := m.Session(); sess != nil {
		_ = sess.Close()
	}
}

// dialServe starts a serving exec; its handshake completes in the
// background (m.Ready).
func (s *Sandbox) dialServe() *served {
	m := &served{Serving: shim.NewServing(), stderr: shim.Limited{N: 4 << 10}}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		err := s.execStream(ctx, shim.ServeArgs(layout.BinaryPath), inR, true, outW, &m.stderr)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(io.ErrClosedPipe)
		m.Finish(nil, fmt.Errorf("the serving exec ended: %v: %s", err, m.stderr.String()))
	}()
	go func() {
		timer := time.AfterFunc(serveWait, func() { outR.CloseWithError(fmt.Errorf("no hello within %v", serveWait)) })
		sess, err := shim.ServeClient(bufio.NewReaderSize(outR, 64<<10), inW, inW.Close)
		timer.Stop()
		if err != nil {
			m.Finish(nil, fmt.Errorf("no hello from the serving exec (%v): %s", err, m.stderr.String()))
			cancel()
			return
		}
		if !m.Finish(sess, nil) {
			_ = sess.Close()
		}
	}()
	return m
}

// session returns the lease's serving session, starting one when there
// is none or the last one broke; nil when there can be none (the serving
// exec did not start, the lease is released, Options.ExecEach): the
// caller then uses an exec.
func (s *Sandbox) session(ctx context.Context) *yamux.Session {
	if s.p.opts.ExecEach {
		return nil
	}
	s.serveMu.Lock()
	m := s.serve
	switch {
	case s.serveOff:
		m = nil
	case m == nil:
		m = s.dialServe()
		s.serve = m
	default:
		select {
		case <-m.Ready():
			if sess := m.Session(); sess != nil && sess.IsClosed() {
				m.close()
				m = s.dialServe()
				s.serve = m
			}
		default:
		}
	}
	s.serveMu.Unlock()
	if m == nil {
		return nil
	}
	select {
	case <-m.Ready():
	case <-ctx.Done():
		return nil
	}
	sess := m.Session()
	if sess == nil {
		// It never served: this binary cannot, and will not later.
		s.serveMu.Lock()
		if s.serve == m {
			s.serveOff, s.serveErr = true, m.Failed()
		}
		s.serveMu.Unlock()
		return nil
	}
	if sess.IsClosed() {
		return nil
	}
	return sess
}

// Degraded reports why the lease's serving exec could not start, so that
// each process is an exec of its own (slower); nil while it serves, before
// the first process, or with Options.ExecEach. It implements
// driver.Degrader.
func (s *Sandbox) Degraded() error {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	if s.serveErr == nil {
		return nil
	}
	return fmt.Errorf("kubernetes: the serving exec of %s could not start (%w); each process is an exec of its own, which is slower", s.id, s.serveErr)
}

// endServe ends the serving exec for good (the lease is released).
func (s *Sandbox) endServe() {
	s.serveMu.Lock()
	m := s.serve
	s.serveOff, s.serve = true, nil
	s.serveMu.Unlock()
	if m != nil {
		m.close()
	}
}

// streamServed runs cmd as a stream of the serving session, as execStream
// runs it as an exec: the same stdin, stdout and stderr, and a non-zero
// exit as a utilexec.ExitError. ok is false when nothing ran (no session,
// or the request could not be sent): the caller then uses an exec.
func (s *Sandbox) streamServed(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (err error, ok bool) {
	sess := s.session(ctx)
	if sess == nil {
		return nil, false
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil, false
	}
	defer st.Close()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = st.SetReadDeadline(time.Unix(1, 0))
		_ = st.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	if _, err := st.Write(shim.ServeLine(cmd, nil)); err != nil {
		if !stop() {
			return ctx.Err(), true
		}
		return nil, false
	}
	if stdin == nil {
		_ = st.Close() // yamux's Close ends only this side: the output is still read
	} else {
		go func() {
			_, _ = io.Copy(st, stdin)
			_ = st.Close()
		}()
	}
	code, exited, rerr := shim.ReadFrames(bufio.NewReaderSize(st, 32<<10), stdout, stderr)
	switch {
	case !stop():
		// What the process still writes is read and dropped, so that it
		// never blocks on a stream nobody reads (an exec's would break).
		<-fired
		_ = st.SetReadDeadline(time.Time{})
		go func() { _, _ = io.Copy(io.Discard, st) }()
		return ctx.Err(), true
	case !exited:
		return fmt.Errorf("the connection to the pod's serving exec broke: %w", rerr), true
	case code != 0:
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}, true
	}
	return nil, true
}
