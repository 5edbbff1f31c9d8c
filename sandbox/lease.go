package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"

	"io/fs"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/snapshot"
)

// ErrClosed is returned by every method of a released lease.
var ErrClosed = driver.ErrClosed

// Lease is an allocated sandbox, held by the caller for one or more turns.
// It wraps a provider's Sandbox with the behaviour every provider shares:
// coded errors, closed checks, tar path checks and bounded output. Methods
// are safe for concurrent use.
//
// Every error a method returns is an *outpost.Error: code sandbox for the
// sandbox's failures (with details.vanished when the provider can tell the
// sandbox is gone), cancelled or timeout when ctx ended, configuration for
// a tar stream CopyIn refuses. Their causes stay reachable with errors.Is:
// ErrClosed, fs.ErrNotExist (CopyOut, List), exec.ErrNotFound (LookPath),
// errors.ErrUnsupported (List), tarsafe.ErrUnsafe (CopyIn).
type Lease struct {
	provider driver.Provider
	sb       driver.Sandbox
	caps     driver.Capabilities

	mu      sync.Mutex
	closed  bool
	active  sync.WaitGroup // running processes, awaited by Close
	onClose []func()
	egress  driver.Egress // the Options.Egress it was opened with
	values  map[any]any   // what the lease's users keep with it (Value)
}

// Acquire allocates a sandbox from p. An empty opts.Workdir is the current
// directory: providers never see an empty one. Errors have code sandbox.
func Acquire(ctx context.Context, p driver.Provider, opts driver.Options) (*Lease, error) {
	if p == nil {
		return nil, outpost.New(outpost.Configuration, "lease", "no sandbox provider")
	}
	wd, err := ResolveWorkdir(opts.Workdir)
	if err != nil {
		return nil, &outpost.Error{Code: outpost.Sandbox, Op: "lease", Msg: "working directory", Err: err}
	}
	opts.Workdir = wd
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
	return &Lease{provider: p, sb: sb, caps: p.Capabilities(), egress: opts.Egress}, nil
}

// ResolveWorkdir is the one place the default working directory is
// chosen: wd, or the current directory when wd is empty.
func ResolveWorkdir(wd string) (string, error) {
	if wd != "" {
		return wd, nil
	}
	return os.Getwd()
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

// Egress is the egress the lease was opened with (driver.Options.Egress);
// whether it is enforced is Capabilities().Egress.
func (l *Lease) Egress() driver.Egress { return l.egress }

// Isolated reports whether the sandbox has its own filesystem.
func (l *Lease) Isolated() bool { return l.caps.Isolated }

// enter counts an operation in, refusing it on a released lease.
func (l *Lease) enter(op string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return &outpost.Error{Code: outpost.Sandbox, Op: op, Err: ErrClosed}
	}
	l.active.Add(1)
	return nil
}

// Start starts a process in the sandbox. The caller must Wait for it.
// Prefer Launch, which also consumes its output and reaps its group.
func (l *Lease) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	p, err := hold(ctx, l, "start", func() (driver.Process, error) { return l.sb.Start(ctx, req) })
	if err != nil {
		return nil, err
	}
	return &trackedProcess{Process: p, done: l.active.Done}, nil
}

// hold runs f as the operation op whose result keeps the lease busy until
// the caller lets it go (l.active.Done): on a failure the lease is let go
// at once and the error coded.
func hold[T any](ctx context.Context, l *Lease, op string, f func() (T, error)) (T, error) {
	var zero T
	if err := l.enter(op); err != nil {
		return zero, err
	}
	v, err := f()
	if err != nil {
		l.active.Done()
		return zero, l.wrap(ctx, op, err)
	}
	return v, nil
}

type trackedProcess struct {
	driver.Process
	once sync.Once
	done func()
}

func (p *trackedProcess) Wait() (st harness.ExitStatus, err error) {
	st, err = p.Process.Wait()
	p.once.Do(p.done)
	return st, err
}

// CopyIn extracts a tar stream into dir inside the sandbox. Entries that
// are absolute, contain "..", link outside dir, or are devices are refused
// with an error wrapping tarsafe.ErrUnsafe (code configuration); setuid
// bits are dropped. A dir that driver.CheckPath refuses (relative,
// unclean, in a kernel filesystem) is refused before the driver sees it.
func (l *Lease) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if err := l.enter("copy-in"); err != nil {
		return err
	}
	defer l.active.Done()
	if err := driver.CheckPath(dir); err != nil {
		return l.wrap(ctx, "copy-in", err)
	}
	f := tarsafe.Filter(r)
	defer f.Close()
	return l.wrap(ctx, "copy-in", l.sb.CopyIn(ctx, dir, f))
}

// CopyOut returns a tar stream of path inside the sandbox. Its entries are
// checked like CopyIn's, except that symbolic and hard links pointing
// outside the stream are dropped rather than failing it: a home often
// holds such links, and nothing outpost copies out follows them. A missing
// path gives an error satisfying errors.Is(err, fs.ErrNotExist); a path
// that driver.CheckPath refuses, one wrapping driver.ErrPath.
func (l *Lease) CopyOut(ctx context.Context, path string) (io.ReadCloser, error) {
	rc, err := hold(ctx, l, "copy-out", func() (io.ReadCloser, error) {
		if err := driver.CheckPath(path); err != nil {
			return nil, err
		}
		return l.sb.CopyOut(ctx, path)
	})
	if err != nil {
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

// Warm asks the sandbox to keep a process launcher ready, so that the
// next Start (and each one after it) costs less (driver.Warmer). It
// returns once the launcher is ready; for providers without one it does
// nothing. Worth it where a sandbox waits before its processes start (a
// Pool calls it on each sandbox it keeps).
func (l *Lease) Warm(ctx context.Context) error {
	w, ok := l.sb.(driver.Warmer)
	if !ok {
		return nil
	}
	if err := l.enter("warm"); err != nil {
		return err
	}
	defer l.active.Done()
	return l.wrap(ctx, "warm", w.Warm(ctx))
}

// Vanished reports whether the provider can tell the sandbox is gone.
func (l *Lease) Vanished(ctx context.Context) bool {
	g, ok := l.sb.(driver.Vanisher)
	return ok && g.Vanished(ctx)
}

// Degraded returns why the sandbox runs its processes a slower way than
// designed (driver.Degrader); nil when it does not, or cannot tell.
func (l *Lease) Degraded() error {
	if d, ok := l.sb.(driver.Degrader); ok {
		return d.Degraded()
	}
	return nil
}

// Value returns what a user of the lease keeps with it under key, made
// by init the first time key is asked for (under the lease's lock: init
// must not call the lease). It lives as long as the lease: the turn
// engine keeps in it which presets' credentials are in place and its
// tunnels to credential gateways, so that the turns of one lease share
// them. Keys follow context.WithValue's rule: a type of the caller's own.
func (l *Lease) Value(key any, init func() any) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.values[key]
	if !ok {
		v = init()
		if l.values == nil {
			l.values = map[any]any{}
		}
		l.values[key] = v
	}
	return v
}

// Tunnel opens a listener on the host whose connections are made from
// inside the sandbox to the address it returns (driver.Tunneler), and
// closes it when the lease is released. A sandbox whose provider has no
// tunnel gives an error satisfying errors.Is(err, errors.ErrUnsupported).
func (l *Lease) Tunnel(ctx context.Context) (string, net.Listener, error) {
	if err := l.enter("tunnel"); err != nil {
		return "", nil, err
	}
	defer l.active.Done()
	tn, ok := l.sb.(driver.Tunneler)
	if !ok {
		return "", nil, l.wrap(ctx, "tunnel", l.unsupported("open a tunnel"))
	}
	addr, ln, err := tn.Tunnel(ctx)
	if err != nil {
		return "", nil, l.wrap(ctx, "tunnel", err)
	}
	l.OnClose(func() { _ = ln.Close() })
	return addr, ln, nil
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
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
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

// LookPath finds an executable on the sandbox's PATH: directly for
// providers that can (PathLooker), otherwise with `command -v` inside it.
// A missing executable gives an error satisfying
// errors.Is(err, exec.ErrNotFound).
func (l *Lease) LookPath(ctx context.Context, name string) (string, error) {
	if err := l.enter("lookpath"); err != nil {
		return "", err
	}
	defer l.active.Done()
	pathEnv := l.sb.Environment().Defaults["PATH"]
	if pl, ok := l.sb.(driver.PathLooker); ok {
		p, err := pl.LookPath(ctx, name, pathEnv)
		return p, l.wrap(ctx, "lookpath", err)
	}
	env := map[string]string{"PATH": pathEnv}
	for k, v := range l.sb.Environment().Fixed {
		env[k] = v
	}
	res, err := l.Exec(ctx, driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `command -v "$1"`, "sh", name}, Env: env}, lookPathLimit)
	if err != nil {
		return "", err
	}
	p := string(bytes.TrimSpace(res.Stdout))
	if !res.Status.Success() || p == "" {
		return "", l.wrap(ctx, "lookpath", fmt.Errorf("%s: %w", name, exec.ErrNotFound))
	}
	return p, nil
}

// List lists the regular files under dir inside the sandbox, for providers
// that can (Lister); others give an error satisfying
// errors.Is(err, errors.ErrUnsupported).
func (l *Lease) List(ctx context.Context, dir string) ([]string, error) {
	if err := l.enter("list"); err != nil {
		return nil, err
	}
	defer l.active.Done()
	ls, ok := l.sb.(driver.Lister)
	if !ok {
		return nil, l.wrap(ctx, "list", l.unsupported("list files"))
	}
	files, err := ls.List(ctx, dir)
	return files, l.wrap(ctx, "list", err)
}

// SnapshotWorkspace describes the workspace's files (metadata only, no
// content; at most limit of them), for providers that can
// (driver.Snapshotter); others give an error satisfying
// errors.Is(err, errors.ErrUnsupported). The engine compares the
// snapshots from before and after a turn to report its changed files.
func (l *Lease) SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error) {
	if err := l.enter("snapshot"); err != nil {
		return snapshot.Snapshot{}, err
	}
	defer l.active.Done()
	sn, ok := l.sb.(driver.Snapshotter)
	if !ok {
		return snapshot.Snapshot{}, l.wrap(ctx, "snapshot", l.unsupported("describe its workspace"))
	}
	s, err := sn.SnapshotWorkspace(ctx, limit)
	if err != nil {
		return snapshot.Snapshot{}, l.wrap(ctx, "snapshot", err)
	}
	return s, nil
}

// unsupported is the cause of an optional operation the provider lacks.
func (l *Lease) unsupported(what string) error {
	return fmt.Errorf("the %s sandbox cannot %s: %w", l.provider.Name(), what, errors.ErrUnsupported)
}

// ctxError codes the end of ctx: timeout for a deadline (the turn's or the
// caller's), cancelled otherwise.
func ctxError(ctx context.Context, op string, cause error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &outpost.Error{Code: outpost.Timeout, Op: op, Msg: "deadline reached", Err: cause}
	}
	return &outpost.Error{Code: outpost.Cancelled, Op: op, Msg: "cancelled", Err: cause}
}

// wrap codes a driver's error, once: an error that already has a code
// keeps it; one caused by the end of ctx is cancelled or timeout; a tar
// stream CopyIn refused is configuration; any other is sandbox, with
// details.vanished when the error wraps driver.ErrVanished or
// driver.ErrDisconnected, or the provider (driver.Vanisher) says the
// sandbox is gone. Answers rather than failures (a missing file or executable, an
// unsupported listing, a released lease) are not worth the question.
func (l *Lease) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *outpost.Error
	switch {
	case errors.As(err, &oe):
		return err
	case ctx.Err() != nil:
		return ctxError(ctx, op, err)
	case errors.Is(err, tarsafe.ErrUnsafe):
		return &outpost.Error{Code: outpost.Configuration, Op: op, Err: err}
	}
	e := &outpost.Error{Code: outpost.Sandbox, Op: op, Err: err}
	if errors.Is(err, driver.ErrVanished) || errors.Is(err, driver.ErrDisconnected) ||
		!isAnswer(err) && l.Vanished(context.WithoutCancel(ctx)) {
		MarkVanished(e, "the sandbox vanished")
	}
	return e
}

// isAnswer reports whether err answers the question asked rather than
// reporting a failure of the sandbox.
func isAnswer(err error) bool {
	for _, target := range []error{fs.ErrNotExist, exec.ErrNotFound, errors.ErrUnsupported, ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// MarkVanished records on e that the sandbox is gone, and that its
// connection dropped when the cause says so (driver.ErrDisconnected: a
// remote host's).
func MarkVanished(e *outpost.Error, msg string) *outpost.Error {
	e.Msg = msg
	if errors.Is(e.Err, driver.ErrDisconnected) {
		e.Detail("disconnected", true)
	}
	return e.Detail("vanished", true)
}

// IsVanished reports whether err records a vanished sandbox (MarkVanished):
// the turn engine tells a sandbox that went away from one that failed.
func IsVanished(err error) bool {
	var oe *outpost.Error
	if !errors.As(err, &oe) {
		return false
	}
	v, _ := oe.Details["vanished"].(bool)
	return v
}
