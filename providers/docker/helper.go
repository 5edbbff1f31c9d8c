package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The shim's helper modes (snapshot, tar) on a spare: a warm sandbox
// answers them without an exec, and the spare shim runs them in its own
// process (shim's in-process modes), so they cost the work itself. A
// sandbox without a spare uses an exec of the shim (snapshot) or the
// engine's archive endpoint (CopyOut).

// spareHelper runs the shim's binary with args (its command line after
// the binary: shim.Subcommand and a mode) on a spare, and returns the
// process, or nil when no spare could take it (then nothing ran).
func (s *Sandbox) spareHelper(ctx context.Context, args []string) (driver.Process, error) {
	sp := s.takeSpare()
	if sp == nil {
		return nil, nil
	}
	p, err := s.startSpare(ctx, sp, driver.ExecRequest{Path: BinaryPath, Args: args, Env: map[string]string{}}, "/", true)
	if errors.Is(err, errSpareDead) {
		return nil, nil
	}
	return p, err
}

// maxSnapshot bounds a workspace snapshot's JSON.
const maxSnapshot = 256 << 20

// spareSnapshot reads the snapshot mode's JSON from p. The shim writes it
// only once the walk has succeeded, so a complete document is the answer:
// it returns then, and the process ends in the background, instead of
// waiting for the engine to end the stream and record the exit.
func spareSnapshot(ctx context.Context, p driver.Process) (driver.Snapshot, error) {
	stop := context.AfterFunc(ctx, func() { _ = p.Signal(driver.Kill); p.Close() })
	var errb bytes.Buffer
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		_, _ = io.Copy(&limited{&errb, 64 << 10}, p.Stderr())
	}()
	reap := func() (harness.ExitStatus, error) {
		_, _ = io.Copy(io.Discard, p.Stdout())
		<-errDone
		st, err := p.Wait()
		p.Close()
		stop()
		return st, err
	}
	var snap driver.Snapshot
	derr := json.NewDecoder(io.LimitReader(p.Stdout(), maxSnapshot)).Decode(&snap)
	if derr == nil {
		go reap() //nolint:errcheck // the answer is in
		if snap.Files == nil {
			snap.Files = map[string]driver.FileStat{}
		}
		return snap, nil
	}
	st, err := reap()
	switch {
	case ctx.Err() != nil:
		return driver.Snapshot{}, ctx.Err()
	case err != nil:
		return driver.Snapshot{}, err
	case !st.Success():
		return driver.Snapshot{}, fmt.Errorf("docker: snapshot of the workspace: exit %d %s: %s", st.Code, st.Signal, strings.TrimSpace(errb.String()))
	}
	return driver.Snapshot{}, fmt.Errorf("docker: snapshot of the workspace: %w", derr)
}

// spareTar is CopyOut through the shim's tar mode on a spare: ok is false
// when there was no spare, and nothing ran.
func (s *Sandbox) spareTar(ctx context.Context, p string) (rc io.ReadCloser, ok bool, err error) {
	pr, err := s.spareHelper(ctx, shim.TarArgs(BinaryPath, p)[1:])
	if err != nil {
		return nil, true, err
	}
	if pr == nil {
		return nil, false, nil
	}
	t := &tarStream{p: pr, path: p, errDone: make(chan struct{})}
	t.stop = context.AfterFunc(ctx, func() { _ = pr.Signal(driver.Kill); pr.Close() })
	go func() {
		defer close(t.errDone)
		_, _ = io.Copy(&limited{&t.errb, 64 << 10}, pr.Stderr())
	}()
	t.r = bufio.NewReaderSize(pr.Stdout(), 64<<10)
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
	p       driver.Process
	path    string
	r       *bufio.Reader
	errb    bytes.Buffer
	errDone chan struct{}
	stop    func() bool

	once sync.Once
	err  error
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
	t.once.Do(func() {
		t.p.Close()
		<-t.errDone
		st, err := t.p.Wait()
		t.stop()
		switch {
		case ctx.Err() != nil:
			t.err = ctx.Err()
		case err != nil:
			t.err = fmt.Errorf("docker: copying %s out: %w", t.path, err)
		case st.Code == shim.ExitMissing:
			t.err = &fs.PathError{Op: "copy out", Path: t.path, Err: fs.ErrNotExist}
		case !st.Success():
			t.err = fmt.Errorf("docker: copying %s out: exit %d %s: %s", t.path, st.Code, st.Signal, strings.TrimSpace(t.errb.String()))
		}
	})
	return t.err
}

// Close ends the copy, whether or not it was read to its end.
func (t *tarStream) Close() error {
	t.p.Close()
	go t.end(context.Background())
	return nil
}
