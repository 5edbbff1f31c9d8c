package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/snapshot"
)

// The shim's helper modes (snapshot, tar, untar) on a spare: a warm sandbox
// answers them without an exec, and the spare shim runs them in its own
// process (shim's in-process modes), so they cost the work itself. A
// sandbox without a spare uses an exec of the shim (snapshot) or the
// engine's archive endpoints (CopyOut, CopyIn). Each archive request
// makes the engine start a process of its own to read or write the
// container's filesystem (about 0.2 CPU-seconds, measured with process
// accounting over the test suite: 1575 of them, 288 CPU-s).

// spareHelper runs the shim's binary with args (its command line after
// the binary: shim.Subcommand and a mode) on a spare, and returns the
// process, or nil when no spare could take it (then nothing ran). With
// stdin, the process reads the caller's Stdin; else /dev/null.
func (s *Sandbox) spareHelper(ctx context.Context, args []string, stdin bool) (driver.Process, error) {
	sp := s.takeSpare()
	if sp == nil {
		if sp = s.servedSpare(ctx); sp == nil {
			return nil, nil
		}
	}
	p, err := s.startSpare(ctx, sp, driver.ExecRequest{Path: layout.BinaryPath, Args: args, Env: map[string]string{}, Stdin: stdin}, "/", true)
	if errors.Is(err, errSpareDead) {
		return nil, nil
	}
	return p, err
}

// maxSnapshot bounds a workspace snapshot's JSON.
const maxSnapshot = 256 << 20

// helper is a helper mode's process on a spare: its stderr kept (bounded)
// for errors, and the caller's ctx ending kills it.
type helper struct {
	p       driver.Process
	errb    shim.Limited
	errDone chan struct{}
	stop    func() bool

	once sync.Once
	st   harness.ExitStatus
	err  error
}

func newHelper(ctx context.Context, p driver.Process) *helper {
	h := &helper{p: p, errb: shim.Limited{N: 64 << 10}, errDone: make(chan struct{})}
	h.stop = context.AfterFunc(ctx, func() { _ = p.Signal(driver.Kill); p.Close() })
	go func() {
		defer close(h.errDone)
		_, _ = io.Copy(&h.errb, p.Stderr())
	}()
	return h
}

// end closes the process's streams (what is left unread is not wanted)
// and waits for it, once. Its error says why the helper failed (what it
// was doing; ctx's error when ctx has ended), nil when it exited 0.
func (h *helper) end(ctx context.Context, what string) (harness.ExitStatus, error) {
	h.once.Do(func() {
		h.p.Close()
		<-h.errDone
		var err error
		h.st, err = h.p.Wait()
		h.stop()
		switch {
		case ctx.Err() != nil:
			h.err = ctx.Err()
		case err != nil:
			h.err = fmt.Errorf("docker: %s: %w", what, err)
		case !h.st.Success():
			h.err = fmt.Errorf("docker: %s: exit %d %s: %s", what, h.st.Code, h.st.Signal, h.errb.String())
		}
	})
	return h.st, h.err
}

// spareSnapshot reads the snapshot mode's JSON from p. The shim writes it
// only once the walk has succeeded, so a complete document is the answer:
// it returns then, and the process ends in the background, instead of
// waiting for the engine to end the stream and record the exit.
func spareSnapshot(ctx context.Context, p driver.Process) (snapshot.Snapshot, error) {
	const what = "snapshot of the workspace"
	h := newHelper(ctx, p)
	var snap snapshot.Snapshot
	derr := json.NewDecoder(io.LimitReader(p.Stdout(), maxSnapshot)).Decode(&snap)
	if derr == nil {
		go h.end(ctx, what) //nolint:errcheck // the answer is in
		if snap.Files == nil {
			snap.Files = map[string]snapshot.FileStat{}
		}
		return snap, nil
	}
	_, _ = io.Copy(io.Discard, p.Stdout()) // to its end: the shim's status is the cause
	if _, err := h.end(ctx, what); err != nil {
		return snapshot.Snapshot{}, err
	}
	return snapshot.Snapshot{}, fmt.Errorf("docker: %s: %w", what, derr)
}

// spareTar is CopyOut through the shim's tar mode on a spare: ok is false
// when there was no spare, and nothing ran. The workspace's PrivateDir is
// left out unread: in a bind workspace it is the read-only mount that
// hides the host's .outpost/, which the sandbox's user may not list, and
// it is never part of the agent's work.
func (s *Sandbox) spareTar(ctx context.Context, p string) (rc io.ReadCloser, ok bool, err error) {
	return s.helperTar(ctx, p, shim.TarArgs(layout.BinaryPath, p, path.Join(layout.Workspace, PrivateDir))[1:])
}

// helperTar is spareTar with the tar mode's command line args.
func (s *Sandbox) helperTar(ctx context.Context, p string, args []string) (rc io.ReadCloser, ok bool, err error) {
	pr, err := s.spareHelper(ctx, args, false)
	if err != nil {
		return nil, true, err
	}
	if pr == nil {
		return nil, false, nil
	}
	t := &tarStream{h: newHelper(ctx, pr), path: p, r: bufio.NewReaderSize(pr.Stdout(), 64<<10)}
	if _, err := t.r.Peek(1); err != nil {
		// No output: a missing path, or a failure.
		if err := t.end(ctx); err != nil {
			return nil, true, err
		}
		return nil, true, fmt.Errorf("docker: copying %s out: no output", p)
	}
	return t, true, nil
}

// tarStream is the output of the shim's tar mode: the end of the stream
// is the end of the process, whose status says whether it is complete.
type tarStream struct {
	h    *helper
	path string
	r    *bufio.Reader
}

func (t *tarStream) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if err == io.EOF {
		if e := t.end(context.Background()); e != nil {
			return n, e
		}
	}
	return n, err
}

// end waits for the process and returns its outcome as CopyOut's error.
func (t *tarStream) end(ctx context.Context) error {
	st, err := t.h.end(ctx, "copying "+t.path+" out")
	if err != nil && st.Code == shim.ExitMissing && ctx.Err() == nil {
		return &fs.PathError{Op: "copy out", Path: t.path, Err: fs.ErrNotExist}
	}
	return err
}

// Close ends the copy, whether or not it was read to its end.
func (t *tarStream) Close() error {
	t.h.p.Close()
	go t.end(context.Background()) //nolint:errcheck // nobody reads on
	return nil
}

// spareUntar is CopyIn through the shim's untar mode on a spare, as the
// sandbox's user (so what it makes is the user's, as the engine's copy
// makes it): ok is false when it cannot be used, and then r is unread.
// It is used only for directories under the home or the workspace, which
// the user owns; the user could not make a missing parent elsewhere (the
// engine, as root, can). The archive is read and checked whole before
// anything is sent; dir is made even when the archive is refused, as the
// engine's copy makes it.
func (s *Sandbox) spareUntar(ctx context.Context, dir string, r io.Reader) (ok bool, err error) {
	if !under(dir, s.Home()) && !under(dir, s.Workdir()) {
		return false, nil
	}
	p, err := s.spareHelper(ctx, shim.UntarArgs(layout.BinaryPath, dir)[1:], true)
	if err != nil || p == nil {
		return err != nil, err
	}
	what := "copying into " + dir
	h := newHelper(ctx, p)
	go io.Copy(io.Discard, p.Stdout()) //nolint:errcheck // untar writes nothing there
	sp := &workspace.Spool{}
	defer sp.Close()
	cerr := workspace.CheckArchive(r, sp)
	var werr error
	if cerr == nil {
		var body io.Reader
		if body, werr = sp.Reader(); werr == nil {
			_, werr = io.Copy(p.Stdin(), body)
		}
	}
	p.Stdin().Close()
	st, err := h.end(ctx, what)
	switch {
	case cerr != nil:
		return true, cerr
	case err != nil && st.Code == shim.ExitUnsafe && ctx.Err() == nil:
		return true, fmt.Errorf("docker: %s: %w: %s", what, tarsafe.ErrUnsafe, strings.TrimSpace(h.errb.String()))
	case err != nil:
		return true, err
	case werr != nil:
		return true, fmt.Errorf("docker: %s: %w", what, werr)
	}
	return true, nil
}

// under reports whether the container path p is root or below it.
func under(p, root string) bool {
	p, root = path.Clean(p), path.Clean(root)
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}
