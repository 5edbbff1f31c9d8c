package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/snapshot"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
)

// Start runs req under the exec shim in the container and returns once
// the program is about to run: its output streams start with the
// program's first byte. A program that is not found (or not executable)
// gives an *exec.Error wrapping exec.ErrNotFound, a missing working
// directory an error wrapping shim.ErrNoDir, a container that is gone or
// stopped one wrapping driver.ErrVanished. ctx bounds only the start.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	dir, err := shim.CheckStart(ctx, "docker", s.id, s.closing.Load(), req.Env, req.Dir, layout.Workspace)
	if err != nil {
		return nil, err
	}
	s.pristine.Store(false)
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
	if sp := s.servedSpare(ctx); sp != nil {
		p, err := s.startSpare(ctx, sp, req, dir, false)
		if !errors.Is(err, errSpareDead) {
			return p, err
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
	token := shim.Token()
	s.execs.Add(1)
	ec, err := s.eng.cli.ContainerExecCreate(ctx, s.cid, container.ExecOptions{
		User:         s.user,
		AttachStdin:  req.Stdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		Cmd:          shim.ExecArgs(layout.BinaryPath, token, layout.RunDir, dir, req.Stdin, req.Path, req.Args),
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
	if err := p.Await(ctx); err != nil {
		return nil, err
	}
	if !p.helper {
		s.active.Add(1)
		p.counted.Store(true)
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
		return fmt.Errorf("docker: %w: %s: %w", driver.ErrVanished, what, err)
	}
	return fmt.Errorf("docker: %s: %w", what, err)
}

// process is one exec of the shim (shim.Process over an exec's attach
// stream).
type process struct {
	*shim.Process
	counted atomic.Bool // in s.active, set before Start returns
	helper  bool        // a helper's (helper.go): never in s.active
}

// Signal sends SIGTERM or SIGKILL to the program's process group through
// the shim's signal mode.
func (p *process) Signal(sig driver.Signal) error { return p.Kill(sig == driver.Kill) }

// newProcess reads conn, the attach stream of an exec of the shim that
// has its request, or (execID "") a stream of the init's connection. up, when not nil, is called once the program is up:
// its first output, or the end of the stream.
func newProcess(s *Sandbox, execID, token, path string, conn types.HijackedResponse, withStdin bool, up func()) *process {
	p := &process{}
	x := shim.Exec{Name: "docker", ID: s.id, Binary: layout.BinaryPath, RunDir: layout.RunDir, Token: token, Path: path, Gone: driver.ErrVanished, Up: up}
	x.Exited = func() {
		if p.counted.Load() {
			s.active.Add(-1)
		}
	}
	if withStdin {
		x.Stdin = stdinWriter{conn: conn}
	}
	var t shim.Transport = &execStream{s: s, execID: execID, path: path, conn: conn}
	if execID == "" {
		// A stream of the init's connection (serve.go).
		t = &servedStream{execStream: execStream{s: s, path: path, conn: conn}}
	}
	p.Process = shim.NewProcess(x, t)
	return p
}

// execStream is the shim.Transport of an exec: its attach stream, the
// exec API for its exit status, the archive endpoint for files.
type execStream struct {
	s      *Sandbox
	execID string
	path   string
	conn   types.HijackedResponse
}

func (e *execStream) Stream(stdout, stderr io.Writer) error {
	_, err := stdcopy.StdCopy(stdout, stderr, e.conn.Reader)
	return err
}

// StartFailed: a shim that never answered, on a stream that ended, may
// have gone with its container.
func (e *execStream) StartFailed(err, streamErr error) error {
	if streamErr == nil && e.s.Vanished(context.Background()) {
		return fmt.Errorf("docker: %w: %s: starting %s: %w", driver.ErrVanished, e.s.id, e.path, err)
	}
	return err
}

func (e *execStream) Run(ctx context.Context, args []string) (int, []byte, error) {
	res, err := e.s.run(ctx, args, nil)
	return res.code, res.stderr, err
}

func (e *execStream) ReadStatus(ctx context.Context, p string) ([]byte, error) {
	rc, _, err := e.s.eng.cli.CopyFromContainer(ctx, e.s.cid, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return shim.FirstFile(rc, 64)
}

func (e *execStream) Releasing() bool { return e.s.closing.Load() }

func (e *execStream) Close() { e.conn.Close() }

// Exit inspects the exec once its stream has ended. The error is
// driver.ErrVanished when the container went away behind outpost's back.
func (e *execStream) Exit() (harness.ExitStatus, error) {
	ctx := context.Background()
	delay := time.Millisecond
	polled := time.Duration(0)
	for {
		ins, err := e.s.eng.cli.ContainerExecInspect(ctx, e.execID)
		if err != nil {
			if e.s.closing.Load() {
				return shim.Killed, nil
			}
			if errdefs.IsNotFound(err) {
				return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: %w: %s (process %s)", driver.ErrVanished, e.s.id, shortID(e.execID))
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: waiting for a process of %s: %w", e.s.id, err)
		}
		if !ins.Running {
			return harness.ExitStatus{Code: ins.ExitCode}, nil
		}
		// The stream has ended but the engine has not recorded the exit
		// yet (or the stream was closed early): poll, and make sure the
		// container itself is still there.
		if polled > 2*time.Second && e.s.Vanished(ctx) {
			if e.s.closing.Load() {
				return shim.Killed, nil
			}
			return harness.ExitStatus{Code: -1}, fmt.Errorf("docker: %w: %s", driver.ErrVanished, e.s.id)
		}
		time.Sleep(delay)
		polled += delay
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// stdinWriter is the program's standard input on the exec's stream. It
// needs no guard of its own: shim.Process makes Write and Close take
// turns and closes it once (its Stdin).
type stdinWriter struct{ conn types.HijackedResponse }

func (w stdinWriter) Write(b []byte) (int, error) { return w.conn.Conn.Write(b) }

// Close ends the program's standard input (a half-close of the stream).
func (w stdinWriter) Close() error {
	if err := w.conn.CloseWrite(); err != nil && !errors.Is(err, syscall.ENOTCONN) {
		return err
	}
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
	if res, ok, err := s.runServed(ctx, cmd, env, max); ok {
		return res, err
	}
	s.execs.Add(1)
	ec, err := s.eng.cli.ContainerExecCreate(ctx, s.cid, container.ExecOptions{User: s.user, AttachStdout: true, AttachStderr: true, Env: env, Cmd: cmd})
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	resp, err := s.eng.cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
	if err != nil {
		return result{}, s.execErr(ctx, cmd[len(cmd)-1], err)
	}
	defer resp.Close()
	out, errb := &shim.Limited{N: max}, &shim.Limited{N: 1 << 20}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, errb, resp.Reader)
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

// LookPath finds an executable on pathEnv (default: the sandbox's PATH)
// inside the container, without a shell. A missing one gives an
// *exec.Error wrapping exec.ErrNotFound. It implements driver.PathLooker.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	pathEnv = s.SearchPath(pathEnv)
	// outpost's own binary leads the default PATH: no need to ask.
	if dir, _, _ := strings.Cut(pathEnv, ":"); dir == path.Dir(layout.BinaryPath) && name == path.Base(layout.BinaryPath) {
		return layout.BinaryPath, nil
	}
	res, err := s.run(ctx, shim.LookPathArgs(layout.BinaryPath, name), []string{"PATH=" + pathEnv})
	if err != nil {
		return "", err
	}
	return shim.LookPathResult("docker", name, res.code, res.stdout, res.stderr)
}

// SnapshotWorkspace describes the workspace's files, inside the container
// (the shim walks it: no content is copied), skipping .git directories and
// .outpost. It implements driver.Snapshotter, in both workspace modes. A
// workspace copied in that nothing can have changed since (no process
// has run) is described from what was copied, without an exec.
func (s *Sandbox) SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error) {
	if snap, ok := s.pristineSnapshot(limit); ok {
		return snap, nil
	}
	cmd := shim.SnapshotArgs(layout.BinaryPath, layout.Workspace, limit)
	if p, err := s.spareHelper(ctx, cmd[1:], false); err != nil {
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

// pristineSnapshot is the workspace's snapshot taken from the archive
// that copied it in, while nothing can have changed it (Sandbox.pristine).
func (s *Sandbox) pristineSnapshot(limit int) (snapshot.Snapshot, bool) {
	if !s.pristine.Load() {
		return snapshot.Snapshot{}, false
	}
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	return s.manifest.Snapshot(limit)
}
