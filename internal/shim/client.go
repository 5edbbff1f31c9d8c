package shim

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/isolate"
)

// The provider's side of the exec shim: one process handle (Process) for
// every provider that runs programs under the shim (docker, kubernetes,
// ssh). A provider supplies only how it reaches the shim (Transport): how
// the exec's byte streams are opened and how they end, how a command of
// the shim's own (its signal mode) is run, and how a file is read. The
// handshake, the kill of a start cut short, exit statuses (signal records
// included) and the handshake's errors are this file's, and behave the
// same on every provider.

// SignalTimeout bounds one delivery of a signal (a run of the shim's
// signal mode) and one read of a status file.
const SignalTimeout = 30 * time.Second

// Killed is the status of a process stopped by its sandbox's release.
var Killed = harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}

// Transport is how a provider reaches one exec of the shim.
type Transport interface {
	// Stream writes the exec's stdout and stderr to the writers until its
	// streams end. Its error says they broke (the program's readers see
	// it); an exit status is not an error here, but Exit's.
	Stream(stdout, stderr io.Writer) error
	// Exit returns the shim's exit status once Stream has returned. Code
	// is the shim's exit code; a Signal set means the status is final (the
	// shim itself was killed, or the sandbox's release stopped it). The
	// error is for the sandbox (vanished, disconnected).
	Exit() (harness.ExitStatus, error)
	// StartFailed classifies a start that got no handshake: err says so
	// (wrapping streamErr, Stream's error, when there was one).
	StartFailed(err, streamErr error) error
	// Run runs the shim's binary with args (a whole command line, the
	// binary first) to completion and returns its exit code and stderr.
	Run(ctx context.Context, args []string) (code int, stderr []byte, err error)
	// ReadStatus returns the content of the shim's status file at path
	// (a transport may remove it).
	ReadStatus(ctx context.Context, path string) ([]byte, error)
	// Releasing reports whether the sandbox is being released: a shim
	// killed by SIGKILL then reports Killed.
	Releasing() bool
	// Close ends the exec's streams (Process.Close).
	Close()
}

// Exec describes one exec of the shim for NewProcess.
type Exec struct {
	Name   string // the provider, the prefix of errors: "docker"
	ID     string // the sandbox, for errors
	Binary string // the shim's binary in the sandbox
	RunDir string // the shim's run directory (--run)
	Token  string // the shim's token (--token)
	Path   string // the program as requested, for errors
	// Stdin is the program's standard input, nil unless it has one.
	Stdin io.WriteCloser
	// Gone is the provider's error for a sandbox that went away (Run's
	// error wrapping it means the process went with it).
	Gone error
	// Up, when not nil, is called once the program is up: its first
	// output, or the end of its streams.
	Up func()
	// Exited, when not nil, is called once Wait has the status.
	Exited func()
}

// Process is one exec of the shim: what a provider's Start returns
// (wrapped to take the driver's signal type). Stdout and Stderr carry
// the program's output, the handshake taken off.
type Process struct {
	x Exec
	t Transport

	stdoutR, stderrR *io.PipeReader
	stdoutW, stderrW *io.PipeWriter
	up               func()

	ready    chan struct{} // closed once the handshake (or its failure) is known
	pid      int           // the shim's pid, after ready
	startErr error         // why the program did not start, after ready
	noShim   bool          // after ready: the shim never answered, nothing ran

	streamDone chan struct{} // closed once Stream has returned
	exited     atomic.Bool   // Wait has the status

	waitOnce sync.Once
	status   harness.ExitStatus
	waitErr  error

	stdin     *guardedStdin // nil unless the program has a standard input
	closeOnce sync.Once
}

// guardedStdin is the program's standard input as the caller sees it:
// its Write and Close, and the Process's own Close, take turns. A
// transport's writer need not be safe for that (an SSH session's stdin
// is not: its Write and Close share an unguarded flag), and a caller
// closing stdin while Close runs is ordinary.
type guardedStdin struct {
	mu     sync.Mutex
	w      io.WriteCloser
	closed bool
}

func (g *guardedStdin) Write(b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, io.ErrClosedPipe
	}
	return g.w.Write(b)
}

// Close closes the writer once; later Closes return nil.
func (g *guardedStdin) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeLocked()
}

func (g *guardedStdin) closeLocked() error {
	if g.closed {
		return nil
	}
	g.closed = true
	return g.w.Close()
}

// closeIdle closes the writer unless a Write holds it (one blocked on a
// peer that reads nothing): then the transport's Close ends that Write,
// and the writer goes with it.
func (g *guardedStdin) closeIdle() {
	if !g.mu.TryLock() {
		return
	}
	defer g.mu.Unlock()
	_ = g.closeLocked()
}

// NewProcess starts reading an exec of the shim that has its request
// (t.Stream runs from now on, in a goroutine of its own).
func NewProcess(x Exec, t Transport) *Process {
	p := &Process{x: x, t: t, ready: make(chan struct{}), streamDone: make(chan struct{})}
	if x.Stdin != nil {
		p.stdin = &guardedStdin{w: x.Stdin}
	}
	p.up = func() {}
	if x.Up != nil {
		var once sync.Once
		p.up = func() { once.Do(x.Up) }
	}
	p.stdoutR, p.stdoutW = io.Pipe()
	p.stderrR, p.stderrW = io.Pipe()
	go p.stream()
	return p
}

// stream runs the transport's stream through a Demux.
func (p *Process) stream() {
	defer close(p.streamDone)
	defer p.up()
	d := NewDemux(p.stdoutW, p.stderrW, p.handshook, p.up)
	err := p.t.Stream(d.Stdout(), d.Stderr())
	if written, ok := d.End(); !ok {
		// The stream ended (or broke) before the handshake.
		cause := err
		if cause == nil {
			cause = io.ErrUnexpectedEOF
		}
		if msg := strings.TrimSpace(written); msg != "" {
			cause = fmt.Errorf("%w: %q", cause, msg)
		}
		// A stream that broke may have lost a handshake; one that ended
		// did not.
		p.noShim = err == nil
		p.startErr = p.t.StartFailed(fmt.Errorf("%s: the exec shim did not start: %w", p.x.Name, cause), err)
		close(p.ready)
	}
	p.stdoutW.CloseWithError(err)
	p.stderrW.CloseWithError(err)
}

// handshook records the shim's handshake, or why it could not be read:
// then it was not the shim speaking (the runtime's "exec failed..."), as
// the shim writes its handshake before anything else.
func (p *Process) handshook(hs Handshake, err error) {
	if err != nil {
		p.noShim = true
		p.startErr = p.t.StartFailed(fmt.Errorf("%s: %w", p.x.Name, err), nil)
	} else {
		p.startErr = hs.StartErr(p.x.Path)
		p.pid = hs.PID
	}
	close(p.ready)
}

// Await waits for the handshake and returns nil once the program runs.
// When ctx ends first it returns ctx's error, and the program is killed
// (with its group) as soon as the shim says it runs: nothing outlives a
// start cut short. A program that did not start is reaped, and its error
// returned: an *exec.Error wrapping exec.ErrNotFound when it is missing
// or not executable, an error wrapping ErrNoDir and fs.ErrNotExist for a
// missing working directory (Handshake.StartErr), or the transport's
// (StartFailed) when the shim never answered.
func (p *Process) Await(ctx context.Context) error {
	select {
	case <-p.ready:
	case <-ctx.Done():
		go p.killCutShort()
		return ctx.Err()
	}
	if p.startErr != nil {
		p.Close()
		_, _ = p.Wait()
		return p.startErr
	}
	return nil
}

// killCutShort kills the program of a start cut short once the shim says
// it runs, then releases and reaps it. A kill that fails (an exec of the
// signal mode lost under load) is tried again, KillAttempts times in all,
// unless the program ends meanwhile: one lost signal must not leave it
// running.
func (p *Process) killCutShort() {
	<-p.ready
	if p.pid > 0 {
		ended := make(chan struct{})
		go func() {
			_, _ = p.Wait()
			close(ended)
		}()
		pause := killPause
	kill:
		for i := 0; i < KillAttempts && p.Kill(true) != nil; i++ {
			select {
			case <-ended:
				break kill
			case <-time.After(pause):
				pause *= 2
			}
		}
	}
	p.Close()
	_, _ = p.Wait()
}

// KillAttempts bounds the kills of a start cut short (killCutShort); the
// pauses between them double from killPause.
const KillAttempts = 5

const killPause = 500 * time.Millisecond

// NoShim reports, once Await has returned, whether the shim never
// answered (its stream ended without a handshake, or with something
// else): then nothing of the program ran.
func (p *Process) NoShim() bool {
	select {
	case <-p.ready:
		return p.noShim
	default:
		return false
	}
}

// Stdin is the program's standard input, nil unless it has one.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Stdout is the program's standard output.
func (p *Process) Stdout() io.Reader { return p.stdoutR }

// Stderr is the program's standard error.
func (p *Process) Stderr() io.Reader { return p.stderrR }

// Wait waits until the program and its group have ended and returns the
// program's status. A program killed by a signal reports it (Code -1 and
// the signal's name), whether the signal came from Kill or from elsewhere
// (the shim records it). The error is for the sandbox (the transport's
// Exit). Processes stopped by the sandbox's release report SIGKILL,
// without an error.
func (p *Process) Wait() (harness.ExitStatus, error) {
	p.waitOnce.Do(func() {
		<-p.streamDone
		p.status, p.waitErr = p.t.Exit()
		if p.waitErr == nil && p.status.Signal == "" {
			p.status = p.decode(p.status.Code)
		}
		// A lost exec stream says nothing of the program: it may still
		// run, and Kill must still reach it.
		p.exited.Store(p.waitErr == nil)
		if p.x.Exited != nil {
			p.x.Exited()
		}
	})
	return p.status, p.waitErr
}

// decode turns the shim's exit status into the program's: 128+n is a
// death by signal n only when the shim recorded it.
func (p *Process) decode(code int) harness.ExitStatus {
	if code <= 128 || code > 128+64 {
		return harness.ExitStatus{Code: code}
	}
	ctx, cancel := context.WithTimeout(context.Background(), SignalTimeout)
	defer cancel()
	if b, err := p.t.ReadStatus(ctx, StatusFile(p.x.RunDir, p.x.Token)); err == nil {
		if sig, ok := ParseStatus(b); ok {
			return harness.ExitStatus{Code: -1, Signal: sig.String()}
		}
	}
	if code == 128+int(syscall.SIGKILL) && p.t.Releasing() {
		return Killed // the shim itself was killed with its sandbox
	}
	return harness.ExitStatus{Code: code}
}

// ParseStatus reads a status file of the exec shim: the signal its
// program died of.
func ParseStatus(b []byte) (syscall.Signal, bool) { return isolate.ParseSignal(string(b)) }

// Kill sends SIGTERM (or SIGKILL when kill is set) to the program's
// process group through the shim's signal mode. A process that has ended
// (Wait has returned its status), or a sandbox that is gone (Exec.Gone),
// is not an error. After a Wait that lost the exec stream (an error) the
// signal is still sent: the program may outlive its stream.
func (p *Process) Kill(kill bool) error {
	select {
	case <-p.ready:
	default:
		return nil // not started: Await kills it
	}
	if p.pid <= 0 || p.exited.Load() {
		return nil
	}
	name := "TERM"
	if kill {
		name = "KILL"
	}
	ctx, cancel := context.WithTimeout(context.Background(), SignalTimeout)
	defer cancel()
	code, stderr, err := p.t.Run(ctx, SignalArgs(p.x.Binary, p.pid, p.x.Token, name))
	switch {
	case err != nil && p.x.Gone != nil && errors.Is(err, p.x.Gone):
		return nil // the process went with its sandbox
	case err != nil:
		return fmt.Errorf("%s: signalling a process of %s: %w", p.x.Name, p.x.ID, err)
	case code != 0:
		return fmt.Errorf("%s: signalling a process of %s: exit %d: %s", p.x.Name, p.x.ID, code, strings.TrimSpace(string(stderr)))
	}
	return nil
}

// Close releases the streams: pending reads end. A program still running
// keeps running (Kill stops it).
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		if p.stdin != nil {
			p.stdin.closeIdle()
		}
		p.t.Close()
		p.stdoutR.CloseWithError(io.ErrClosedPipe)
		p.stderrR.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

// CheckStart is what a provider's Start checks first: ctx, a sandbox
// being released (the provider's name and the sandbox's id say which),
// and the names and values of the request's environment. It returns the
// working directory: dir, or def when dir is "".
func CheckStart(ctx context.Context, name, id string, releasing bool, env map[string]string, dir, def string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if releasing {
		return "", fmt.Errorf("%s: %s is being released", name, id)
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("%s: invalid variable %q", name, k)
		}
	}
	if dir == "" {
		dir = def
	}
	return dir, nil
}

// Done is closed once the exec's streams have ended.
func (p *Process) Done() <-chan struct{} { return p.streamDone }

// FirstFile reads the first file of a tar stream, at most max bytes.
func FirstFile(r io.Reader, max int64) ([]byte, error) {
	tr := tar.NewReader(r)
	if _, err := tr.Next(); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(tr, max))
}

// Token returns a new random token for an exec of the shim.
func Token() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Limited keeps the first N bytes written to it and discards the rest,
// without failing a write: a helper's bounded output.
type Limited struct {
	buf bytes.Buffer
	N   int
}

func (l *Limited) Write(p []byte) (int, error) {
	if room := l.N - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (l *Limited) Bytes() []byte { return l.buf.Bytes() }

// String returns what was kept, spaces trimmed.
func (l *Limited) String() string { return strings.TrimSpace(l.buf.String()) }
