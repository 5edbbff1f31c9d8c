package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Start runs req under the exec shim on the host, in a session of the
// provider's connection, and returns once the program is about to run.
// The environment travels on the session's standard input, never on a
// command line. A program that is not found gives an *exec.Error wrapping
// exec.ErrNotFound, a missing working directory an error wrapping
// fs.ErrNotExist, a dropped connection driver.ErrDisconnected.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	dir, err := shim.CheckStart(ctx, "ssh", s.id, s.closing.Load(), req.Env, req.Dir, s.Workdir())
	if err != nil {
		return nil, err
	}
	sess, err := s.c.newSession()
	if err != nil {
		return nil, err
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("ssh: %w", err)
	}
	token := shim.Token()
	t := &session{s: s, sess: sess, stdin: stdin, path: req.Path, env: shim.EnvLine(req.Env), keep: req.Stdin}
	argv := shim.RemoteExecArgs(s.c.remote.binary, token, s.runDir, dir, req.Stdin, req.Path, req.Args)
	if s.iso != nil {
		argv = slices.Insert(argv, 3, s.iso.arg())
	}
	t.cmd = "exec " + command(argv...)
	x := shim.Exec{Name: "ssh", ID: s.id, Binary: s.c.remote.binary, RunDir: s.runDir, Token: token, Path: req.Path, Gone: driver.ErrDisconnected}
	if req.Stdin {
		x.Stdin = stdin
	}
	p := &process{shim.NewProcess(x, t)}
	if err := p.Await(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// connErr classifies a session error.
func (s *Sandbox) connErr(what string, err error) error {
	if s.c.dead() || errors.Is(err, io.EOF) {
		s.c.checkAlive()
	}
	if s.c.dead() {
		return fmt.Errorf("ssh: %w: %s: %v", s.c.lost(), what, err)
	}
	return fmt.Errorf("ssh: %s: %w", what, err)
}

// process is one session running the exec shim (shim.Process over it).
type process struct{ *shim.Process }

// Signal sends SIGTERM or SIGKILL to the program's process group through
// the shim's signal mode. A connection that dropped is not an error (the
// process is lost with it).
func (p *process) Signal(sig driver.Signal) error { return p.Kill(sig == driver.Kill) }

// session is the shim.Transport of a session running the exec shim.
type session struct {
	s     *Sandbox
	sess  *ssh.Session
	stdin io.WriteCloser
	cmd   string
	path  string
	env   []byte // the environment line, sent first on stdin
	keep  bool   // the program reads stdin after the environment line

	err    error // how the session ended, once Stream has returned
	closed atomic.Bool
}

// Stream starts the shim, sends it the environment and waits for the
// session's end.
func (t *session) Stream(stdout, stderr io.Writer) error {
	t.sess.Stdout, t.sess.Stderr = stdout, stderr
	if err := t.sess.Start(t.cmd); err != nil {
		t.err = t.s.connErr("starting "+t.path, err)
		return t.err
	}
	if _, err := t.stdin.Write(t.env); err != nil {
		t.sess.Close()
		_ = t.sess.Wait()
		t.err = t.s.connErr("sending the environment", err)
		return t.err
	}
	if !t.keep {
		_ = t.stdin.Close()
	}
	t.err = t.sess.Wait()
	var ee *ssh.ExitError
	if t.err == nil || errors.As(t.err, &ee) {
		return nil // an exit status: Exit's
	}
	return t.err
}

// StartFailed: the session ended before the shim spoke: the connection,
// or a host that cannot run it.
func (t *session) StartFailed(err, streamErr error) error {
	if t.s.c.dead() || errors.Is(streamErr, driver.ErrDisconnected) {
		return fmt.Errorf("ssh: %w: starting %s: %v", t.s.c.lost(), t.path, err)
	}
	return err
}

// Exit returns the session's exit status. The error is driver.ErrDisconnected
// when the connection dropped.
func (t *session) Exit() (harness.ExitStatus, error) {
	s, err := t.s, t.err
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return harness.ExitStatus{}, nil
	case errors.As(err, &ee):
		if sig := ee.Signal(); sig != "" {
			// The shim itself was killed (a release or a sweep reaped it).
			return harness.ExitStatus{Code: -1, Signal: signalName(sig)}, nil
		}
		return harness.ExitStatus{Code: ee.ExitStatus()}, nil
	}
	if s.closing.Load() {
		return shim.Killed, nil
	}
	if !s.c.dead() {
		s.c.checkAlive()
	}
	if s.c.dead() {
		return harness.ExitStatus{Code: -1}, fmt.Errorf("ssh: %w: the process of %s was lost with it", s.c.lost(), s.id)
	}
	if t.closed.Load() {
		return shim.Killed, nil
	}
	return harness.ExitStatus{Code: -1}, fmt.Errorf("ssh: waiting for a process of %s: %w", s.id, err)
}

func (t *session) Run(ctx context.Context, args []string) (int, []byte, error) {
	res, err := run(ctx, t.s.c, command(args...), nil)
	return res.code, res.stderr, err
}

// ReadStatus reads the shim's status file, and removes it.
func (t *session) ReadStatus(ctx context.Context, f string) ([]byte, error) {
	res, err := run(ctx, t.s.c, "cat "+shq(f)+" 2>/dev/null; rm -f "+shq(f), nil)
	return res.stdout, err
}

func (t *session) Releasing() bool { return t.s.closing.Load() }

func (t *session) Close() {
	t.closed.Store(true)
	_ = t.sess.Close()
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

// LookPath finds an executable on pathEnv (default: the sandbox's PATH)
// on the host, as exec would, without a shell. It implements
// driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	pathEnv = s.SearchPath(pathEnv)
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == s.c.remote.binDir && name == "outpost" {
		return s.c.remote.binary, nil
	}
	res, err := run(ctx, s.c, "PATH="+shq(pathEnv)+" exec "+command(shim.LookPathArgs(s.c.remote.binary, name)...), nil)
	if err != nil {
		return "", err
	}
	return shim.LookPathResult("ssh", name, res.code, res.stdout, res.stderr)
}
