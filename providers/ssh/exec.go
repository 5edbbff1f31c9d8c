package ssh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// signalTimeout bounds one Signal (a session running the shim's signal
// mode).
const signalTimeout = 30 * time.Second

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start runs req under the exec shim on the host, in a session of the
// provider's connection, and returns once the program is about to run.
// The environment travels on the session's standard input, never on a
// command line. A program that is not found gives an *exec.Error wrapping
// exec.ErrNotFound, a missing working directory an error wrapping
// fs.ErrNotExist, a dropped connection ErrDisconnected.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closing.Load() {
		return nil, fmt.Errorf("ssh: %s is being released", s.id)
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("ssh: invalid variable %q", k)
		}
	}
	dir := req.Dir
	if dir == "" {
		dir = s.workdir
	}
	sess, err := s.c.newSession()
	if err != nil {
		return nil, err
	}
	stdin, err1 := sess.StdinPipe()
	stdout, err2 := sess.StdoutPipe()
	stderr, err3 := sess.StderrPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		sess.Close()
		return nil, fmt.Errorf("ssh: %w", err)
	}
	token := randomHex(8)
	cmd := "exec " + command(shim.RemoteExecArgs(s.c.remote.binary, token, s.runDir, dir, req.Stdin, req.Path, req.Args)...)
	if err := sess.Start(cmd); err != nil {
		sess.Close()
		return nil, s.connErr("starting "+req.Path, err)
	}
	p := &process{s: s, sess: sess, token: token, path: req.Path, ready: make(chan struct{}), out: bufio.NewReaderSize(stdout, 32<<10), errR: stderr}
	if req.Stdin {
		p.stdin = stdin
	}
	go p.handshake(stdin, shim.EnvLine(req.Env), req.Stdin)
	select {
	case <-p.ready:
	case <-ctx.Done():
		sess.Close()
		<-p.ready
		go p.Wait()
		return nil, ctx.Err()
	}
	if p.startErr != nil {
		sess.Close()
		_, _ = p.Wait()
		return nil, p.startErr
	}
	return p, nil
}

// connErr classifies a session error.
func (s *Sandbox) connErr(what string, err error) error {
	if s.c.dead() || errors.Is(err, io.EOF) {
		s.c.checkAlive()
	}
	if s.c.dead() {
		return fmt.Errorf("%w: %s: %v", ErrDisconnected, what, err)
	}
	return fmt.Errorf("ssh: %s: %w", what, err)
}

// process is one session running the exec shim.
type process struct {
	s     *Sandbox
	sess  *ssh.Session
	token string
	path  string
	stdin io.WriteCloser
	out   *bufio.Reader
	errR  io.Reader

	ready    chan struct{}
	pid      int
	startErr error

	exited   atomic.Bool
	waitOnce sync.Once
	status   harness.ExitStatus
	waitErr  error
	closed   atomic.Bool
}

// handshake sends the environment and reads the shim's first line.
func (p *process) handshake(stdin io.WriteCloser, envLine []byte, keep bool) {
	defer close(p.ready)
	if _, err := stdin.Write(envLine); err != nil {
		p.startErr = p.s.connErr("sending the environment", err)
		return
	}
	if !keep {
		_ = stdin.Close()
	}
	hs, err := shim.ReadHandshake(p.out)
	switch {
	case err != nil:
		// The session ended before the shim spoke: the connection, or a
		// host that cannot run it.
		var msg []byte
		if p.s.c.dead() {
			p.startErr = fmt.Errorf("%w: starting %s", ErrDisconnected, p.path)
			return
		}
		msg, _ = io.ReadAll(io.LimitReader(p.errR, 4096))
		p.startErr = fmt.Errorf("ssh: the exec shim did not start: %w: %s", err, strings.TrimSpace(string(msg)))
	default:
		p.startErr = hs.StartErr(p.path)
		p.pid = hs.PID
	}
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}
func (p *process) Stdout() io.Reader { return p.out }
func (p *process) Stderr() io.Reader { return p.errR }

var killed = harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}

// Wait waits for the program (and its group) to end and returns its
// status; a death by signal reports the signal. The error is for the
// sandbox: ErrDisconnected when the connection dropped.
func (p *process) Wait() (harness.ExitStatus, error) {
	p.waitOnce.Do(func() {
		p.status, p.waitErr = p.wait()
		p.exited.Store(true)
	})
	return p.status, p.waitErr
}

func (p *process) wait() (harness.ExitStatus, error) {
	err := p.sess.Wait()
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return harness.ExitStatus{}, nil
	case errors.As(err, &ee):
		if sig := ee.Signal(); sig != "" {
			// The shim itself was killed (a release or a sweep reaped it).
			return harness.ExitStatus{Code: -1, Signal: signalName(sig)}, nil
		}
		return p.decode(ee.ExitStatus()), nil
	}
	if p.s.closing.Load() {
		return killed, nil
	}
	if !p.s.c.dead() {
		p.s.c.checkAlive()
	}
	if p.s.c.dead() {
		return harness.ExitStatus{Code: -1}, fmt.Errorf("%w: the process of %s was lost with it", ErrDisconnected, p.s.id)
	}
	if p.closed.Load() {
		return killed, nil
	}
	return harness.ExitStatus{Code: -1}, fmt.Errorf("ssh: waiting for a process of %s: %w", p.s.id, err)
}

// signals maps the names of RFC 4254's exit-signal to signals.
var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// signalName is the name ExitStatus uses for an exit-signal's.
func signalName(sig string) string {
	if s, ok := signals[sig]; ok {
		return s.String()
	}
	return "SIG" + sig
}

// decode turns the shim's exit status into the program's: 128+n is a
// death by signal n only when the shim recorded it.
func (p *process) decode(code int) harness.ExitStatus {
	if code <= 128 || code > 128+64 {
		return harness.ExitStatus{Code: code}
	}
	ctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	f := shim.StatusFile(p.s.runDir, p.token)
	res, err := run(ctx, p.s.c, "cat "+shq(f)+" 2>/dev/null; rm -f "+shq(f), nil)
	if err == nil {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(string(res.stdout)), "signal "); ok {
			if n, err := strconv.Atoi(rest); err == nil && n > 0 && n <= 64 {
				return harness.ExitStatus{Code: -1, Signal: syscall.Signal(n).String()}
			}
		}
	}
	if code == 128+int(syscall.SIGKILL) && p.s.closing.Load() {
		return killed
	}
	return harness.ExitStatus{Code: code}
}

// Signal sends SIGTERM or SIGKILL to the program's process group through
// the shim's signal mode. A process that has ended is not an error; nor
// is a connection that dropped (the process is lost with it).
func (p *process) Signal(sig driver.Signal) error {
	if p.pid <= 0 || p.exited.Load() {
		return nil
	}
	name := "TERM"
	if sig == driver.Kill {
		name = "KILL"
	}
	ctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	res, err := run(ctx, p.s.c, command(shim.SignalArgs(p.s.c.remote.binary, p.pid, p.token, name)...), nil)
	if err != nil {
		if errors.Is(err, ErrDisconnected) {
			return nil
		}
		return fmt.Errorf("ssh: signalling a process of %s: %w", p.s.id, err)
	}
	if res.code != 0 {
		return fmt.Errorf("ssh: signalling a process of %s: exit %d: %s", p.s.id, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}

// Close releases the session: pending reads end.
func (p *process) Close() error {
	if p.closed.CompareAndSwap(false, true) {
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
		_ = p.sess.Close()
	}
	return nil
}

// LookPath finds an executable on pathEnv (default: the sandbox's PATH)
// on the host, as exec would, without a shell. It implements
// driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	if pathEnv == "" {
		pathEnv = s.env.Defaults["PATH"]
	}
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == s.c.remote.binDir && name == "outpost" {
		return s.c.remote.binary, nil
	}
	res, err := run(ctx, s.c, "PATH="+shq(pathEnv)+" exec "+command(shim.LookPathArgs(s.c.remote.binary, name)...), nil)
	if err != nil {
		return "", err
	}
	switch res.code {
	case 0:
		if p := strings.TrimSpace(string(res.stdout)); p != "" {
			return p, nil
		}
	case 1:
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	return "", fmt.Errorf("ssh: looking up %s: exit %d: %s", name, res.code, strings.TrimSpace(string(bytes.TrimSpace(res.stderr))))
}
