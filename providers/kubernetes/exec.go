package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// stream runs cmd in the pod's sandbox container: a stream of the
// lease's serving exec (serve.go), else through the exec subresource:
// WebSocket (the v5 protocol, which half-closes stdin), and SPDY when the
// server or a proxy refuses the upgrade, as kubectl does. A command that
// exits non-zero gives an error satisfying utilexec.ExitError.
func (s *Sandbox) stream(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return s.streamWith(ctx, cmd, stdin, false, stdout, stderr)
}

// streamWith is stream; live says stdin stays open while the program
// runs. It runs cmd as a stream of the lease's serving exec (serve.go),
// or as an exec of its own when there is none.
func (s *Sandbox) streamWith(ctx context.Context, cmd []string, stdin io.Reader, live bool, stdout, stderr io.Writer) error {
	if err, ok := s.streamServed(ctx, cmd, stdin, stdout, stderr); ok {
		return err
	}
	return s.execStream(ctx, cmd, stdin, live, stdout, stderr)
}

// execStream runs cmd as an exec of its own; live goes SPDY first
// (executor).
func (s *Sandbox) execStream(ctx context.Context, cmd []string, stdin io.Reader, live bool, stdout, stderr io.Writer) error {
	req := s.p.api.core.Post().Resource("pods").Namespace(s.p.ns).Name(s.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: cmd, Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil}, apiCodecs().params)
	ex, err := s.p.executor(req.URL(), live)
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// executor returns the exec executor of u: WebSocket first, SPDY when
// the upgrade is refused; for a live stdin, SPDY first.
//
// A live stdin stays open while its program runs (a turn's agent): it may
// be idle for minutes before it ends, and client-go's WebSocket executor
// (v0.34) cannot end a stdin idle for a minute. Each write of stdin sets
// the connection's write deadline a minute ahead, and the stream's Close
// (the v5 CLOSE signal) is written under the last one: past it, the
// write fails at once with a timeout, the connection is marked broken,
// and every later heartbeat ping fails too, silently (client-go takes a
// timeout for a passing failure). The program never sees the end of its
// input, so an agent waiting for it (a live session's end) never exits,
// and 61 s later, no pong having come, the read deadline fails the
// stream (`next reader: ... i/o timeout`). `(echo hi; sleep 65) |
// kubectl exec -i POD -- cat` hangs the same way. SPDY half-closes a
// stream with a FIN frame and no deadline. Behind a proxy that refuses
// SPDY's upgrade, WebSocket remains the fallback, with that limit.
func (p *Provider) executor(u *url.URL, live bool) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(p.cfg, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: exec: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(p.cfg, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: exec: %w", err)
	}
	first, second := ws, spdy
	if live {
		first, second = spdy, ws
	}
	return remotecommand.NewFallbackExecutor(first, second, refused)
}

// refused reports whether an exec's upgrade was refused, by the server or
// a proxy, before anything ran: WebSocket's typed errors, and SPDY's,
// which client-go (v0.34) gives only as text.
func refused(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) ||
		(err != nil && strings.HasPrefix(err.Error(), "unable to upgrade connection"))
}

// exitCode returns the exit status of a stream's error: 0 for nil, the
// status for an ExitError, -1 and the error otherwise.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee utilexec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	return -1, err
}

// result is the outcome of a short helper exec.
type result struct {
	code           int
	stdout, stderr []byte
}

// run runs a helper command to completion.
func (s *Sandbox) run(ctx context.Context, cmd []string, stdin io.Reader) (result, error) {
	out, errb := &shim.Limited{N: 1 << 20}, &shim.Limited{N: 1 << 20}
	code, err := exitCode(s.stream(ctx, cmd, stdin, out, errb))
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	return result{code: code, stdout: out.Bytes(), stderr: errb.Bytes()}, nil
}

// execErr classifies a failed exec: a pod that is gone has vanished.
func (s *Sandbox) execErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !s.closing.Load() && s.Vanished(context.WithoutCancel(ctx)) {
		return fmt.Errorf("kubernetes: %w: %s: %s", driver.ErrVanished, what, s.reason())
	}
	return s.p.apiErr(ctx, what+" in pod "+s.pod, err)
}

// Start runs req under the exec shim in the pod and returns once the
// program is about to run. The environment goes to the shim on the
// exec's stdin, ahead of the program's own input. A program that is not
// found gives an *exec.Error wrapping exec.ErrNotFound, a missing working
// directory an error wrapping shim.ErrNoDir and fs.ErrNotExist, a pod
// that is gone one wrapping driver.ErrVanished. ctx bounds only the start.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	dir, err := shim.CheckStart(ctx, "kubernetes", s.id, s.closing.Load(), req.Env, req.Dir, layout.Workspace)
	if err != nil {
		return nil, err
	}
	block := shim.EnvLine(req.Env)
	token := shim.Token()
	t := &podExec{s: s, path: req.Path, done: make(chan struct{}), stdin: bytes.NewReader(block)}
	t.cmd = shim.RemoteExecArgs(layout.BinaryPath, token, layout.RunDir, dir, req.Stdin, req.Path, req.Args)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	x := shim.Exec{Name: "kubernetes", ID: s.id, Binary: layout.BinaryPath, RunDir: layout.RunDir, Token: token, Path: req.Path, Gone: driver.ErrVanished}
	if req.Stdin {
		pr, pw := io.Pipe()
		x.Stdin, t.stdinR = pw, pr
		t.stdin = io.MultiReader(bytes.NewReader(block), pr)
	}
	p := &process{}
	x.Exited = func() {
		s.procsMu.Lock()
		delete(s.procs, p)
		s.procsMu.Unlock()
	}
	s.procsMu.Lock()
	p.Process = shim.NewProcess(x, t)
	s.procs[p] = true
	s.procsMu.Unlock()
	if err := p.Await(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// process is one exec of the shim (shim.Process over a pod exec).
type process struct{ *shim.Process }

// Signal sends SIGTERM or SIGKILL to the program's process group through
// the shim's signal mode.
func (p *process) Signal(sig driver.Signal) error { return p.Kill(sig == driver.Kill) }

// podExec is the shim.Transport of a pod exec: the exec subresource's
// streams, whose end carries the exit status.
type podExec struct {
	s      *Sandbox
	path   string
	cmd    []string
	stdin  io.Reader
	stdinR *io.PipeReader
	ctx    context.Context
	cancel context.CancelFunc

	done chan struct{} // the stream has ended
	err  error         // its error, after done
}

func (t *podExec) Stream(stdout, stderr io.Writer) error {
	err := t.s.streamWith(t.ctx, t.cmd, t.stdin, t.stdinR != nil, stdout, stderr)
	t.err = err
	if t.stdinR != nil {
		t.stdinR.CloseWithError(io.ErrClosedPipe)
	}
	close(t.done)
	if _, serr := exitCode(err); serr == nil {
		return nil // an exit status: Exit's
	}
	return err
}

// StartFailed: an exec that broke before the shim spoke may have lost
// its pod.
func (t *podExec) StartFailed(err, streamErr error) error {
	if streamErr != nil {
		return t.s.execErr(context.Background(), "starting "+t.path, err)
	}
	return err
}

// Exit returns the shim's exit status from the stream's end. The error is
// driver.ErrVanished with the pod's reason when it went away.
func (t *podExec) Exit() (harness.ExitStatus, error) {
	s := t.s
	code, err := exitCode(t.err)
	if err != nil || code == 128+int(syscall.SIGKILL) || code == 128+int(syscall.SIGTERM) {
		if s.Vanished(context.Background()) {
			if s.closing.Load() {
				return shim.Killed, nil
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("kubernetes: %w: %s", driver.ErrVanished, s.reason())
		}
	}
	if err != nil {
		if s.closing.Load() {
			return shim.Killed, nil
		}
		return harness.ExitStatus{Code: -1}, fmt.Errorf("kubernetes: waiting for a process of %s: %w", s.id, err)
	}
	return harness.ExitStatus{Code: code}, nil
}

func (t *podExec) Run(ctx context.Context, args []string) (int, []byte, error) {
	res, err := t.s.run(ctx, args, nil)
	return res.code, res.stderr, err
}

func (t *podExec) ReadStatus(ctx context.Context, p string) ([]byte, error) {
	rc, err := t.s.tarOut(ctx, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return shim.FirstFile(rc, 64)
}

func (t *podExec) Releasing() bool { return t.s.closing.Load() }

// Close: the stream ends with the process; a closed reader must not keep
// it waiting on us.
func (t *podExec) Close() {
	go func() {
		<-t.done
		t.cancel()
	}()
}

// LookPath finds an executable on pathEnv inside the pod without a shell
// (the shim's lookpath mode under its exec mode, which sets PATH). A
// missing one gives an *exec.Error wrapping exec.ErrNotFound. It
// implements driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	pathEnv = s.SearchPath(pathEnv)
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == "/outpost/bin" && name == "outpost" {
		return layout.BinaryPath, nil
	}
	if _, err := shim.CheckStart(ctx, "kubernetes", s.id, false, map[string]string{"PATH": pathEnv}, "/", "/"); err != nil {
		return "", err
	}
	block := shim.EnvLine(map[string]string{"PATH": pathEnv})
	cmd := shim.RemoteExecArgs(layout.BinaryPath, shim.Token(), layout.RunDir, "/", false, layout.BinaryPath, shim.LookPathArgs(layout.BinaryPath, name)[1:])
	res, err := s.run(ctx, cmd, bytes.NewReader(block))
	if err != nil {
		return "", err
	}
	out := res.stdout
	if i := bytes.IndexByte(out, '\n'); i >= 0 {
		out = out[i+1:] // the shim's handshake
	}
	return shim.LookPathResult("kubernetes", name, res.code, out, res.stderr)
}
