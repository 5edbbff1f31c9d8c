package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// signalTimeout bounds one Signal (an exec of the shim's signal mode).
const signalTimeout = 30 * time.Second

// stream runs cmd in the pod's sandbox container through the exec
// subresource: WebSocket (the v5 protocol, which half-closes stdin), and
// SPDY when the server or a proxy refuses the upgrade, as kubectl does.
// A command that exits non-zero gives an error satisfying
// utilexec.ExitError.
func (s *Sandbox) stream(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := s.p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.p.ns).Name(s.id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: cmd, Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil}, scheme.ParameterCodec)
	ex, err := s.p.executor(req.URL())
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

func (p *Provider) executor(u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(p.cfg, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: exec: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(p.cfg, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: exec: %w", err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
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
	var out, errb bytes.Buffer
	code, err := exitCode(s.stream(ctx, cmd, stdin, &limited{&out, 1 << 20}, &limited{&errb, 1 << 20}))
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
		return fmt.Errorf("%w: %s: %s", ErrVanished, what, s.reason())
	}
	return s.p.apiErr(ctx, what+" in pod "+s.id, err)
}

// limited keeps at most n bytes and discards the rest without blocking.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// envBlock is the environment of a request as the shim reads it first
// on its stdin (shim.EnvLine): values never go on a command line.
func envBlock(env map[string]string) ([]byte, error) {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("kubernetes: invalid variable %q", k)
		}
	}
	return shim.EnvLine(env), nil
}

// Start runs req under the exec shim in the pod and returns once the
// program is about to run. The environment goes to the shim on the
// exec's stdin, ahead of the program's own input. A program that is not
// found gives an *exec.Error wrapping exec.ErrNotFound, a missing working
// directory an error wrapping shim.ErrNoDir and fs.ErrNotExist, a pod
// that is gone one wrapping ErrVanished. ctx bounds only the start.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closing.Load() {
		return nil, fmt.Errorf("kubernetes: %s is being released", s.id)
	}
	dir := req.Dir
	if dir == "" {
		dir = Workspace
	}
	block, err := envBlock(req.Env)
	if err != nil {
		return nil, err
	}
	token := randomHex(8)
	cmd := shim.RemoteExecArgs(BinaryPath, token, runDir, dir, req.Stdin, req.Path, req.Args)
	p := newProcess(s, token, req.Path)
	var stdin io.Reader = bytes.NewReader(block)
	if req.Stdin {
		pr, pw := io.Pipe()
		p.stdin, p.stdinR = pw, pr
		stdin = io.MultiReader(bytes.NewReader(block), pr)
	}
	s.procsMu.Lock()
	s.procs[p] = true
	s.procsMu.Unlock()
	go p.run(cmd, stdin)
	select {
	case <-p.ready:
	case <-ctx.Done():
		// Nothing may outlive the failed start: stop the program once the
		// shim says it runs.
		go func() {
			<-p.ready
			if p.pid > 0 {
				_ = p.Signal(driver.Kill)
			}
			p.Close()
			_, _ = p.Wait()
		}()
		return nil, ctx.Err()
	}
	if p.startErr != nil {
		p.Close()
		_, _ = p.Wait()
		return nil, p.startErr
	}
	return p, nil
}

// process is one exec of the shim.
type process struct {
	s      *Sandbox
	token  string
	path   string
	stdin  *io.PipeWriter
	stdinR *io.PipeReader
	cancel context.CancelFunc
	ctx    context.Context

	stdoutR, stderrR *io.PipeReader
	stdoutW, stderrW *io.PipeWriter

	ready    chan struct{}
	pid      int
	startErr error

	done      chan struct{} // the stream has ended
	streamErr error         // its error, after done

	waitOnce  sync.Once
	status    harness.ExitStatus
	waitErr   error
	closeOnce sync.Once
	exited    bool
}

func newProcess(s *Sandbox, token, path string) *process {
	p := &process{s: s, token: token, path: path, ready: make(chan struct{}), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.stdoutR, p.stdoutW = io.Pipe()
	p.stderrR, p.stderrW = io.Pipe()
	return p
}

func (p *process) run(cmd []string, stdin io.Reader) {
	d := shim.NewDemux(p.stdoutW, p.stderrW, p.handshook, nil)
	err := p.s.stream(p.ctx, cmd, stdin, d.Stdout(), d.Stderr())
	if written, ok := d.End(); !ok {
		msg := strings.TrimSpace(written)
		cause := err
		if cause == nil {
			cause = io.ErrUnexpectedEOF
		}
		if msg != "" {
			cause = fmt.Errorf("%w: %q", cause, msg)
		}
		if _, serr := exitCode(err); serr != nil {
			p.startErr = p.s.execErr(context.Background(), "starting "+p.path, cause)
		} else {
			p.startErr = fmt.Errorf("kubernetes: the exec shim did not start: %w", cause)
		}
		close(p.ready)
	}
	p.streamErr = err
	if p.stdinR != nil {
		p.stdinR.CloseWithError(io.ErrClosedPipe)
	}
	werr := err
	if _, serr := exitCode(err); serr == nil {
		werr = nil
	}
	p.stdoutW.CloseWithError(werr)
	p.stderrW.CloseWithError(werr)
	close(p.done)
}

// handshook records the shim's handshake, or why it could not be read.
func (p *process) handshook(hs shim.Handshake, err error) {
	if err != nil {
		p.startErr = fmt.Errorf("kubernetes: %w", err)
	} else {
		p.startErr = hs.StartErr(p.path)
		p.pid = hs.PID
	}
	close(p.ready)
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}
func (p *process) Stdout() io.Reader { return p.stdoutR }
func (p *process) Stderr() io.Reader { return p.stderrR }

var killed = harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}

// Wait waits until the program and its group have ended and returns the
// program's status; a death by signal reports the signal. The error is
// for the sandbox: ErrVanished with the pod's reason when it went away.
// Processes stopped by the lease's Close report SIGKILL.
func (p *process) Wait() (harness.ExitStatus, error) {
	p.waitOnce.Do(func() {
		<-p.done
		p.status, p.waitErr = p.wait()
		p.s.procsMu.Lock()
		delete(p.s.procs, p)
		p.exited = true
		p.s.procsMu.Unlock()
	})
	return p.status, p.waitErr
}

func (p *process) wait() (harness.ExitStatus, error) {
	ctx := context.Background()
	code, err := exitCode(p.streamErr)
	if err != nil || code == 128+int(syscall.SIGKILL) || code == 128+int(syscall.SIGTERM) {
		if p.s.Vanished(ctx) {
			if p.s.closing.Load() {
				return killed, nil
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("%w: %s", ErrVanished, p.s.reason())
		}
	}
	if err != nil {
		if p.s.closing.Load() {
			return killed, nil
		}
		return harness.ExitStatus{Code: -1}, fmt.Errorf("kubernetes: waiting for a process of %s: %w", p.s.id, err)
	}
	if code <= 128 || code > 128+64 {
		return harness.ExitStatus{Code: code}, nil
	}
	if sig, ok := p.signalRecord(ctx); ok {
		return harness.ExitStatus{Code: -1, Signal: sig.String()}, nil
	}
	if code == 128+int(syscall.SIGKILL) && p.s.closing.Load() {
		return killed, nil
	}
	return harness.ExitStatus{Code: code}, nil
}

// signalRecord reads the shim's status file.
func (p *process) signalRecord(ctx context.Context) (syscall.Signal, bool) {
	ctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	rc, err := p.s.tarOut(ctx, shim.StatusFile(runDir, p.token))
	if err != nil {
		return 0, false
	}
	defer rc.Close()
	b, err := readTarFile(rc, 64)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "signal ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n <= 0 || n > 64 {
		return 0, false
	}
	return syscall.Signal(n), true
}

// Signal sends SIGTERM or SIGKILL to the program's process group through
// the shim's signal mode. A process that has ended, or a pod that is
// gone, is not an error.
func (p *process) Signal(sig driver.Signal) error {
	p.s.procsMu.Lock()
	exited := p.exited
	p.s.procsMu.Unlock()
	if p.pid <= 0 || exited {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	name := "TERM"
	if sig == driver.Kill {
		name = "KILL"
	}
	ctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	res, err := p.s.run(ctx, shim.SignalArgs(BinaryPath, p.pid, p.token, name), nil)
	if err != nil {
		if errors.Is(err, ErrVanished) {
			return nil
		}
		return fmt.Errorf("kubernetes: signalling a process of %s: %w", p.s.id, err)
	}
	if res.code != 0 {
		return fmt.Errorf("kubernetes: signalling a process of %s: exit %d: %s", p.s.id, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}

// Close releases the streams: pending reads end. A process still running
// keeps running (Signal stops it).
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
		p.stdoutR.CloseWithError(io.ErrClosedPipe)
		p.stderrR.CloseWithError(io.ErrClosedPipe)
		go func() {
			// The stream ends with the process; a closed reader must not
			// keep it waiting on us.
			<-p.done
			p.cancel()
		}()
	})
	return nil
}

// LookPath finds an executable on pathEnv inside the pod without a shell
// (the shim's lookpath mode under its exec mode, which sets PATH). A
// missing one gives an *exec.Error wrapping exec.ErrNotFound. It
// implements driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	if pathEnv == "" {
		pathEnv = s.env.Defaults["PATH"]
	}
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == "/outpost/bin" && name == "outpost" {
		return BinaryPath, nil
	}
	block, err := envBlock(map[string]string{"PATH": pathEnv})
	if err != nil {
		return "", err
	}
	cmd := shim.RemoteExecArgs(BinaryPath, randomHex(8), runDir, "/", false, BinaryPath, shim.LookPathArgs(BinaryPath, name)[1:])
	res, err := s.run(ctx, cmd, bytes.NewReader(block))
	if err != nil {
		return "", err
	}
	out := res.stdout
	if i := bytes.IndexByte(out, '\n'); i >= 0 {
		out = out[i+1:] // the shim's handshake
	}
	switch res.code {
	case 0:
		if p := strings.TrimSpace(string(out)); p != "" {
			return p, nil
		}
	case 1:
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	return "", fmt.Errorf("kubernetes: looking up %s: exit %d: %s", name, res.code, strings.TrimSpace(string(res.stderr)))
}
