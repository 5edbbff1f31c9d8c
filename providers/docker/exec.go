package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/snapshot"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
)

// signalTimeout bounds one Signal (an exec of the shim's signal mode).
const signalTimeout = 30 * time.Second

// Start runs req under the exec shim in the container and returns once
// the program is about to run: its output streams start with the
// program's first byte. A program that is not found (or not executable)
// gives an *exec.Error wrapping exec.ErrNotFound, a missing working
// directory an error wrapping shim.ErrNoDir, a container that is gone or
// stopped one wrapping ErrVanished. ctx bounds only the start.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closing.Load() {
		return nil, fmt.Errorf("docker: %s is being released", s.id)
	}
	dir := req.Dir
	if dir == "" {
		dir = Workspace
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("docker: invalid variable %q", k)
		}
	}
	if sp := s.takeSpare(); sp != nil {
		p, err := s.startSpare(ctx, sp, req, dir, false)
		if err == nil {
			return p, nil // the next spare is made once p is up
		}
		defer s.refillSpare()
		if !errors.Is(err, errSpareDead) {
			return nil, err
		}
	}
	return s.startExec(ctx, req, dir)
}

// startExec starts req with an exec of its own.
func (s *Sandbox) startExec(ctx context.Context, req driver.ExecRequest, dir string) (driver.Process, error) {
	names := make([]string, 0, len(req.Env))
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		names = append(names, k)
		env = append(env, k+"="+v)
	}
	sort.Strings(names)
	b, _ := json.Marshal(names) // strings: cannot fail
	env = append(env, shim.EnvNames+"="+string(b))
	token := randomHex(8)
	ec, err := s.eng.cli.ContainerExecCreate(ctx, s.cid, container.ExecOptions{
		AttachStdin:  req.Stdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		Cmd:          shim.ExecArgs(BinaryPath, token, runDir, dir, req.Stdin, req.Path, req.Args),
	})
	if err != nil {
		return nil, s.execErr(ctx, "starting "+req.Path, err)
	}
	resp, err := s.eng.cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, s.execErr(ctx, "starting "+req.Path, err)
	}
	return s.await(ctx, newProcess(s, ec.ID, token, req.Path, resp, req.Stdin, nil))
}

// await waits for the handshake of p, an exec of the shim that has its
// request, and returns p once its program runs.
func (s *Sandbox) await(ctx context.Context, p *process) (driver.Process, error) {
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
		if p.noShim && s.Vanished(context.WithoutCancel(ctx)) {
			return nil, fmt.Errorf("%w: %s: starting %s: %w", ErrVanished, s.id, p.path, p.startErr)
		}
		return nil, p.startErr
	}
	if !p.helper {
		s.active.Add(1)
		p.counted = true
	}
	return p, nil
}

// execErr classifies an error of the exec API: a container that is gone
// or not running has vanished.
func (s *Sandbox) execErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errdefs.IsNotFound(err) || errdefs.IsConflict(err) || (!s.closing.Load() && s.Vanished(context.WithoutCancel(ctx))) {
		return fmt.Errorf("%w: %s: %w", ErrVanished, what, err)
	}
	return fmt.Errorf("docker: %s: %w", what, err)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// process is one exec of the shim.
type process struct {
	s      *Sandbox
	execID string
	token  string
	path   string // as requested, for errors
	conn   types.HijackedResponse
	stdin  io.WriteCloser

	stdoutR, stderrR *io.PipeReader
	stdoutW, stderrW *io.PipeWriter

	ready    chan struct{} // closed once the handshake (or its failure) is known
	pid      int           // the shim's pid in the container, after ready
	startErr error         // why the program did not start, after ready
	noShim   bool          // after ready: no handshake came, so the program never ran
	up       func()        // called (once) on the program's first output

	streamDone chan struct{} // closed when the attach stream has ended
	exited     atomic.Bool   // Wait has seen the exit
	counted    bool          // in s.active, set before Start returns
	helper     bool          // a helper's (helper.go): never in s.active

	waitOnce sync.Once
	status   harness.ExitStatus
	waitErr  error

	closeOnce sync.Once
}

// newProcess demultiplexes conn, the attach stream of an exec of the shim
// that has its request. up, when not nil, is called once the program is
// up: its first output, or the end of the stream.
func newProcess(s *Sandbox, execID, token, path string, conn types.HijackedResponse, withStdin bool, up func()) *process {
	p := &process{s: s, execID: execID, token: token, path: path, conn: conn, ready: make(chan struct{}), streamDone: make(chan struct{})}
	if up != nil {
		var once sync.Once
		p.up = func() { once.Do(up) }
	} else {
		p.up = func() {}
	}
	p.stdoutR, p.stdoutW = io.Pipe()
	p.stderrR, p.stderrW = io.Pipe()
	if withStdin {
		p.stdin = &stdinWriter{conn: conn}
	}
	go p.demux()
	return p
}

// demux splits the attach stream into stdout and stderr, taking the
// shim's handshake off the head of stdout.
func (p *process) demux() {
	defer close(p.streamDone)
	defer p.up()
	d := shim.NewDemux(p.stdoutW, p.stderrW, p.handshook, p.up)
	_, err := stdcopy.StdCopy(d.Stdout(), d.Stderr(), p.conn.Reader)
	if written, ok := d.End(); !ok {
		// The stream ended (or broke) before the handshake.
		msg := strings.TrimSpace(written)
		cause := err
		if cause == nil {
			cause = io.ErrUnexpectedEOF
		}
		if msg != "" {
			cause = fmt.Errorf("%w: %q", cause, msg)
		}
		p.startErr = fmt.Errorf("docker: the exec shim did not start: %w", cause)
		// A stream that broke may have lost a handshake; one that ended
		// did not.
		p.noShim = err == nil
		close(p.ready)
	}
	p.stdoutW.CloseWithError(err)
	p.stderrW.CloseWithError(err)
}

// handshakeKnown reports whether the handshake (or its failure) is known.
func (p *process) handshakeKnown() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// handshook records the shim's handshake, or why it could not be read:
// then it was not the shim speaking (the runtime's "exec failed..."), as
// the shim writes its handshake before anything else.
func (p *process) handshook(hs shim.Handshake, err error) {
	if err != nil {
		p.startErr = fmt.Errorf("docker: %w", err)
		p.noShim = true
	} else {
		p.startErr = hs.StartErr(p.path)
		p.pid = hs.PID
	}
	close(p.ready)
}

type stdinWriter struct {
	conn types.HijackedResponse
	mu   sync.Mutex
	done bool
}

func (w *stdinWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return 0, io.ErrClosedPipe
	}
	return w.conn.Conn.Write(b)
}

// Close ends the program's standard input (a half-close of the stream).
func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	if err := w.conn.CloseWrite(); err != nil && !errors.Is(err, syscall.ENOTCONN) {
		return err
	}
	return nil
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}
func (p *process) Stdout() io.Reader { return p.stdoutR }
func (p *process) Stderr() io.Reader { return p.stderrR }

// Wait waits until the program and its group have ended and returns the
// program's status. A program killed by a signal reports it (Code -1 and
// the signal's name). The error is for the sandbox: ErrVanished when the
// container went away behind outpost's back. Processes stopped by the
// lease's Close report SIGKILL, without an error.
func (p *process) Wait() (harness.ExitStatus, error) {
	p.waitOnce.Do(func() {
		p.status, p.waitErr = p.wait()
		p.exited.Store(true)
		if p.counted {
			p.s.active.Add(-1)
		}
	})
	return p.status, p.waitErr
}

var killed = harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}

func (p *process) wait() (harness.ExitStatus, error) {
	<-p.streamDone
	ctx := context.Background()
	delay := time.Millisecond
	polled := time.Duration(0)
	for {
		ins, err := p.s.eng.cli.ContainerExecInspect(ctx, p.execID)
		if err != nil {
			if p.s.closing.Load() {
				return killed, nil
			}
			if errdefs.IsNotFound(err) {
				return harness.ExitStatus{Code: -1}, fmt.Errorf("%w: %s (process %s)", ErrVanished, p.s.id, shortID(p.execID))
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: waiting for a process of %s: %w", p.s.id, err)
		}
		if !ins.Running {
			return p.decode(ctx, ins.ExitCode), nil
		}
		// The stream has ended but the engine has not recorded the exit
		// yet (or the stream was closed early): poll, and make sure the
		// container itself is still there.
		if polled > 2*time.Second && p.s.Vanished(ctx) {
			if p.s.closing.Load() {
				return killed, nil
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("%w: %s", ErrVanished, p.s.id)
		}
		time.Sleep(delay)
		polled += delay
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// decode turns the shim's exit status into the program's: 128+n is a
// death by signal n only when the shim recorded it.
func (p *process) decode(ctx context.Context, code int) harness.ExitStatus {
	if code <= 128 || code > 128+64 {
		return harness.ExitStatus{Code: code}
	}
	if sig, ok := p.signalRecord(ctx); ok {
		return harness.ExitStatus{Code: -1, Signal: sig.String()}
	}
	if code == 128+int(syscall.SIGKILL) && p.s.closing.Load() {
		return killed // the shim itself was killed with its container
	}
	return harness.ExitStatus{Code: code}
}

// signalRecord reads the status file of the shim.
func (p *process) signalRecord(ctx context.Context) (syscall.Signal, bool) {
	rc, _, err := p.s.eng.cli.CopyFromContainer(ctx, p.s.cid, shim.StatusFile(runDir, p.token))
	if err != nil {
		return 0, false
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return 0, false
	}
	b, err := io.ReadAll(io.LimitReader(tr, 64))
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
// the shim's signal mode. A process that has ended, or a container that is
// gone, is not an error.
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
	res, err := p.s.run(ctx, shim.SignalArgs(BinaryPath, p.pid, p.token, name), nil)
	if err != nil {
		if errors.Is(err, ErrVanished) {
			return nil // the process went with its container
		}
		return fmt.Errorf("docker: signalling a process of %s: %w", p.s.id, err)
	}
	if res.code != 0 {
		return fmt.Errorf("docker: signalling a process of %s: exit %d: %s", p.s.id, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}

// Close releases the streams: pending reads end.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
		p.conn.Close()
		p.stdoutR.CloseWithError(io.ErrClosedPipe)
		p.stderrR.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

// result is the outcome of a short helper exec.
type result struct {
	code           int
	stdout, stderr []byte
}

// run runs a helper command of the shim (not under the exec shim) to
// completion, with env added to the container's environment.
func (s *Sandbox) run(ctx context.Context, cmd, env []string) (result, error) {
	return s.runLimit(ctx, cmd, env, 1<<20)
}

// runLimit is run keeping at most max bytes of standard output.
func (s *Sandbox) runLimit(ctx context.Context, cmd, env []string, max int) (result, error) {
	ec, err := s.eng.cli.ContainerExecCreate(ctx, s.cid, container.ExecOptions{AttachStdout: true, AttachStderr: true, Env: env, Cmd: cmd})
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	resp, err := s.eng.cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	defer resp.Close()
	var out, errb bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&limited{&out, max}, &limited{&errb, 1 << 20}, resp.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		resp.Close()
		<-copied
		return result{}, ctx.Err()
	}
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	delay := time.Millisecond
	for {
		ins, err := s.eng.cli.ContainerExecInspect(ctx, ec.ID)
		if err != nil {
			return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
		}
		if !ins.Running {
			return result{code: ins.ExitCode, stdout: out.Bytes(), stderr: errb.Bytes()}, nil
		}
		select {
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
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

// LookPath finds an executable on pathEnv (default: the sandbox's PATH)
// inside the container, without a shell. A missing one gives an
// *exec.Error wrapping exec.ErrNotFound. It implements driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	if pathEnv == "" {
		pathEnv = s.env.Defaults["PATH"]
	}
	// outpost's own binary leads the default PATH: no need to ask.
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == path.Dir(BinaryPath) && name == path.Base(BinaryPath) {
		return BinaryPath, nil
	}
	res, err := s.run(ctx, shim.LookPathArgs(BinaryPath, name), []string{"PATH=" + pathEnv})
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
	return "", fmt.Errorf("docker: looking up %s: exit %d: %s", name, res.code, strings.TrimSpace(string(res.stderr)))
}

// SnapshotWorkspace describes the workspace's files, inside the container
// (the shim walks it: no content is copied), skipping .git directories and
// .outpost. It implements driver.Snapshotter, in both workspace modes.
func (s *Sandbox) SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error) {
	cmd := shim.SnapshotArgs(BinaryPath, Workspace, limit)
	if p, err := s.spareHelper(ctx, cmd[1:]); err != nil {
		return snapshot.Snapshot{}, err
	} else if p != nil {
		return spareSnapshot(ctx, p)
	}
	res, err := s.runLimit(ctx, cmd, nil, maxSnapshot)
	if err != nil {
		return snapshot.Snapshot{}, err
	}
	if res.code != 0 {
		return snapshot.Snapshot{}, fmt.Errorf("docker: snapshot of the workspace: exit %d: %s", res.code, strings.TrimSpace(string(res.stderr)))
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal(res.stdout, &snap); err != nil {
		return snapshot.Snapshot{}, fmt.Errorf("docker: snapshot of the workspace: %w", err)
	}
	if snap.Files == nil {
		snap.Files = map[string]snapshot.FileStat{}
	}
	return snap, nil
}
