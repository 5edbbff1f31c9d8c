package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// ErrClosed is returned by every method of a released lease.
var ErrClosed = driver.ErrClosed

// Lease is an allocated sandbox, held by the caller for one or more turns.
// It wraps a provider's Sandbox with the behaviour every provider shares:
// coded errors, closed checks, tar path checks and bounded output. Methods
// are safe for concurrent use.
type Lease struct {
	provider driver.Provider
	sb       driver.Sandbox
	caps     driver.Capabilities

	mu      sync.Mutex
	closed  bool
	applied map[string]bool // harness names whose plans are in place
	active  sync.WaitGroup  // running processes, awaited by Close
	onClose []func()
}

// Acquire allocates a sandbox from p. Errors have code sandbox.
func Acquire(ctx context.Context, p driver.Provider, opts driver.Options) (*Lease, error) {
	if p == nil {
		return nil, outpost.New(outpost.Configuration, "lease", "no sandbox provider")
	}
	sb, err := p.Open(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "lease", err)
		}
		// A provider that knows the fault is the caller's configuration
		// (an unverified host key, a refused key) says so with a coded
		// error; everything else is the sandbox's.
		code := outpost.Sandbox
		var oe *outpost.Error
		if errors.As(err, &oe) && oe.Code == outpost.Configuration {
			code = outpost.Configuration
		}
		return nil, &outpost.Error{Code: code, Op: "lease", Msg: "allocating a " + p.Name() + " sandbox", Err: err}
	}
	return &Lease{provider: p, sb: sb, caps: p.Capabilities(), applied: map[string]bool{}}, nil
}

// ID identifies the sandbox.
func (l *Lease) ID() string { return l.sb.ID() }

// Home is the sandbox's private home directory.
func (l *Lease) Home() string { return l.sb.Home() }

// Workdir is the working directory inside the sandbox.
func (l *Lease) Workdir() string { return l.sb.Workdir() }

// Provider returns the provider the lease came from.
func (l *Lease) Provider() driver.Provider { return l.provider }

// Capabilities of the lease's provider.
func (l *Lease) Capabilities() driver.Capabilities { return l.caps }

// Environment is the provider's environment for processes.
func (l *Lease) Environment() driver.Environment { return l.sb.Environment() }

// Sandbox returns the driver value, for provider-specific inspection.
func (l *Lease) Sandbox() driver.Sandbox { return l.sb }

func (l *Lease) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.active.Add(1)
	return nil
}

// Start starts a process in the sandbox. The caller must Wait for it.
func (l *Lease) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := l.enter(); err != nil {
		return nil, outpost.Wrap(outpost.Sandbox, "start", err)
	}
	p, err := l.sb.Start(ctx, req)
	if err != nil {
		l.active.Done()
		return nil, err
	}
	return &trackedProcess{Process: p, done: l.active.Done}, nil
}

type trackedProcess struct {
	driver.Process
	once sync.Once
	done func()
}

func (p *trackedProcess) Wait() (harness.ExitStatus, error) {
	st, err := p.Process.Wait()
	p.once.Do(p.done)
	return st, err
}

// ExecResult is the outcome of Exec.
type ExecResult struct {
	Status harness.ExitStatus
	Stdout []byte
	Stderr []byte
}

// Exec runs a command to completion and collects its output, keeping at
// most limit bytes of each stream (0 = 1 MiB); the rest is discarded, never
// blocking the process. When ctx ends the process group is terminated, then
// killed after grace.
func (l *Lease) Exec(ctx context.Context, req driver.ExecRequest, limit int) (ExecResult, error) {
	if limit <= 0 {
		limit = 1 << 20
	}
	p, err := l.Start(ctx, req)
	if err != nil {
		return ExecResult{}, err
	}
	var out, errb capped
	out.max, errb.max = limit, limit
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&out, p.Stdout()) }()
	go func() { defer wg.Done(); io.Copy(&errb, p.Stderr()) }()
	stop := context.AfterFunc(ctx, func() { stopProcess(p, 2*time.Second) })
	wg.Wait()
	st, werr := p.Wait()
	stop()
	res := ExecResult{Status: st, Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if werr != nil {
		return res, werr
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// stopProcess terminates p's group and kills it after grace unless it
// exits first. It returns at once.
func stopProcess(p driver.Process, grace time.Duration) {
	_ = p.Signal(driver.Terminate)
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		<-t.C
		_ = p.Signal(driver.Kill)
	}()
}

// capped keeps the first max bytes written. It does not embed
// bytes.Buffer: the promoted ReadFrom would let io.Copy bypass Write.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Bytes() []byte { return c.buf.Bytes() }

func (c *capped) Write(b []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// CopyIn extracts a tar stream into dir inside the sandbox. Entries that
// are absolute, contain "..", link outside dir, or are devices are refused
// with an error wrapping tarsafe.ErrUnsafe; setuid bits are dropped.
func (l *Lease) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if err := l.enter(); err != nil {
		return err
	}
	defer l.active.Done()
	f := tarsafe.Filter(r)
	defer f.Close()
	return l.sb.CopyIn(ctx, dir, f)
}

// WriteFiles writes in-memory files under dir inside the sandbox.
func (l *Lease) WriteFiles(ctx context.Context, dir string, files []tarsafe.File) error {
	var buf bytes.Buffer
	if err := tarsafe.Write(&buf, files); err != nil {
		return err
	}
	return l.CopyIn(ctx, dir, &buf)
}

// CopyOut returns a tar stream of path inside the sandbox. Its entries are
// checked like CopyIn's, except that symbolic and hard links pointing
// outside the stream are dropped rather than failing it: a home often
// holds such links, and nothing outpost copies out follows them.
func (l *Lease) CopyOut(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	rc, err := l.sb.CopyOut(ctx, path)
	if err != nil {
		l.active.Done()
		return nil, err
	}
	return &closeFunc{ReadCloser: tarsafe.FilterOut(rc), close: func() error {
		defer l.active.Done()
		return rc.Close()
	}}, nil
}

type closeFunc struct {
	io.ReadCloser
	once  sync.Once
	close func() error
}

func (c *closeFunc) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(func() { err = errors.Join(err, c.close()) })
	return err
}

// Vanished reports whether the provider can tell the sandbox is gone.
func (l *Lease) Vanished(ctx context.Context) bool {
	g, ok := l.sb.(driver.Vanisher)
	return ok && g.Vanished(ctx)
}

// applied reports and marks whether a harness's plans are in place.
func (l *Lease) planned(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied[name]
}

func (l *Lease) markPlanned(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied[name] = true
}

// OnClose registers f to run when the lease is released (after the
// sandbox is closed). Used to release host-side reservations.
func (l *Lease) OnClose(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onClose = append(l.onClose, f)
}

// Close releases the sandbox. It waits for processes started through the
// lease to be waited for, up to ctx's end. Calling it again returns nil.
// Use a fresh context: a cancelled turn must still release its sandbox.
func (l *Lease) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	hooks := l.onClose
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// The provider gets a context of its own: a lease whose wait ran out
	// must still be released.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	err := l.sb.Close(cctx)
	for _, f := range hooks {
		f()
	}
	if err != nil {
		return &outpost.Error{Code: outpost.Sandbox, Op: "release", Err: err}
	}
	return nil
}

func ctxError(ctx context.Context, op string, cause error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(context.Cause(ctx), errTurnTimeout) {
		return &outpost.Error{Code: outpost.Timeout, Op: op, Msg: "deadline reached", Err: cause}
	}
	return &outpost.Error{Code: outpost.Cancelled, Op: op, Msg: "cancelled", Err: cause}
}

var errTurnTimeout = fmt.Errorf("turn timeout")

// Isolated reports whether the sandbox has its own filesystem.
func (l *Lease) Isolated() bool { return l.caps.Isolated }

// LookPath finds an executable on the sandbox's PATH: directly for
// providers that can (PathLooker), otherwise with `command -v` inside it.
func (l *Lease) LookPath(ctx context.Context, name string) (string, error) {
	if err := l.enter(); err != nil {
		return "", err
	}
	defer l.active.Done()
	pathEnv := l.sb.Environment().Defaults["PATH"]
	if pl, ok := l.sb.(driver.PathLooker); ok {
		return pl.LookPath(ctx, name, pathEnv)
	}
	env := map[string]string{"PATH": pathEnv}
	for k, v := range l.sb.Environment().Fixed {
		env[k] = v
	}
	res, err := l.Exec(ctx, driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `command -v "$1"`, "sh", name}, Env: env}, 4096)
	if err != nil {
		return "", err
	}
	p := string(bytes.TrimSpace(res.Stdout))
	if !res.Status.Success() || p == "" {
		return "", fmt.Errorf("%s: executable file not found in $PATH", name)
	}
	return p, nil
}

// List lists the regular files under dir inside the sandbox, for providers
// that can (Lister); others give an error satisfying
// errors.Is(err, errors.ErrUnsupported).
func (l *Lease) List(ctx context.Context, dir string) ([]string, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.active.Done()
	ls, ok := l.sb.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("the %s sandbox cannot list files: %w", l.provider.Name(), errors.ErrUnsupported)
	}
	return ls.List(ctx, dir)
}
