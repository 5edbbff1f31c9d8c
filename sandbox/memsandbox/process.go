package memsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost/harness"
)

// Program is a process's code: it runs with the process's context, which
// is cancelled when the process is signalled, and returns the exit status
// (0-255; other values are reduced modulo 256, as by a real exit). A
// panic is reported on stderr and gives status 2. A program must return
// once ctx is done; until it does, a Terminate leaves it running (a real
// process may trap SIGTERM too), while Kill ends the process at once for
// its users: Wait returns and its streams close.
type Program func(ctx context.Context, p *Proc) int

// Proc is what a program sees of its process.
type Proc struct {
	// Args are the arguments, without the program's name.
	Args []string
	// Env is the complete environment of the process.
	Env map[string]string
	// Dir is the working directory, canonical and absolute.
	Dir string
	// Stdin is the standard input; it reads as empty when the request did
	// not ask for one.
	Stdin io.Reader
	// Stdout and Stderr stream to the process's readers; writes block
	// while 64 KiB are unread and fail once the streams are closed.
	Stdout, Stderr io.Writer
	// FS is the sandbox's files, relative names resolved from Dir.
	FS *FS

	proc *process
}

// Go runs f as a background member of the process group, like a child a
// shell leaves running: f gets the group's context, cancelled by any
// signal. The process's streams end only when f and the program have both
// returned (or on Kill), but Wait reports the program's own exit without
// waiting for f. Go may be called by the program, or by a member it
// started, while it runs.
func (p *Proc) Go(f func(ctx context.Context)) {
	p.proc.members.Add(1)
	go func() {
		defer p.proc.members.Done()
		defer func() { _ = recover() }() // a crashing child dies alone
		f(p.proc.ctx)
	}()
}

// Errors a program finds in context.Cause(ctx) once signalled.
var (
	ErrTerminated = errors.New("memsandbox: process terminated")
	ErrKilled     = errors.New("memsandbox: process killed")
)

// pipeSize is how many unread bytes a stream holds before writes block,
// as with an operating system pipe.
const pipeSize = 64 << 10

// pipe is a bounded in-memory pipe. Unlike io.Pipe it buffers, so a
// process can write a little output and exit before anyone reads, as with
// real pipes; it still streams, and blocks writers when full.
type pipe struct {
	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte
	wclosed bool // no more writes: reads drain the buffer, then EOF
	rclosed bool // no more reads: writes fail, the buffer is dropped
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond.L = &p.mu
	return p
}

func (p *pipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for !p.rclosed && !p.wclosed && len(p.buf) >= pipeSize {
			p.cond.Wait()
		}
		if p.rclosed || p.wclosed {
			return n, io.ErrClosedPipe
		}
		k := min(pipeSize-len(p.buf), len(b))
		p.buf = append(p.buf, b[:k]...)
		b = b[k:]
		n += k
		p.cond.Broadcast()
	}
	return n, nil
}

func (p *pipe) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.rclosed && !p.wclosed && len(p.buf) == 0 {
		p.cond.Wait()
	}
	if p.rclosed {
		return 0, io.ErrClosedPipe
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[:copy(p.buf, p.buf[n:])]
	p.cond.Broadcast()
	return n, nil
}

func (p *pipe) closeWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wclosed = true
	p.cond.Broadcast()
}

func (p *pipe) closeRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rclosed = true
	p.buf = nil
	p.cond.Broadcast()
}

type pipeReader struct{ p *pipe }

func (r pipeReader) Read(b []byte) (int, error) { return r.p.read(b) }

type pipeWriter struct{ p *pipe }

func (w pipeWriter) Write(b []byte) (int, error) { return w.p.write(b) }

// Close ends the stream: the reader gets what is buffered, then EOF.
func (w pipeWriter) Close() error {
	w.p.closeWrite()
	return nil
}

// process is a running program and its group.
type process struct {
	sb                    *Sandbox
	stdin, stdout, stderr *pipe // stdin nil unless requested
	ctx                   context.Context
	cancel                context.CancelCauseFunc
	members               sync.WaitGroup // the program and its Go members

	mu     sync.Mutex
	exited bool   // Wait may return
	signal string // "terminated" or "killed", delivered before the exit
	status harness.ExitStatus
	err    error
	done   chan struct{} // closed when exited becomes true
}

// start runs prog as a new process of sb.
func start(sb *Sandbox, prog Program, req driver.ExecRequest, dir string) *process {
	ctx, cancel := context.WithCancelCause(context.Background())
	p := &process{sb: sb, stdout: newPipe(), stderr: newPipe(), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	env := make(map[string]string, len(req.Env))
	for k, v := range req.Env {
		env[k] = v
	}
	pr := &Proc{
		Args:   append([]string(nil), req.Args...),
		Env:    env,
		Dir:    dir,
		Stdin:  eofReader{},
		Stdout: pipeWriter{p.stdout},
		Stderr: pipeWriter{p.stderr},
		FS:     &FS{t: sb.fs, dir: dir},
		proc:   p,
	}
	if req.Stdin {
		p.stdin = newPipe()
		pr.Stdin = pipeReader{p.stdin}
	}
	p.members.Add(1)
	go func() {
		defer p.members.Done()
		p.exit(run(ctx, prog, pr))
	}()
	go func() {
		p.members.Wait()
		p.closeStreams()
		cancel(nil)
		sb.forget(p)
	}()
	return p
}

// run calls prog, turning a panic into status 2.
func run(ctx context.Context, prog Program, pr *Proc) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(pr.Stderr, "panic: %v\n\n%s", r, debug.Stack())
			code = 2
		}
	}()
	return prog(ctx, pr) & 0xff
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// exit records the program's return.
func (p *process) exit(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	p.exited = true
	if p.signal != "" {
		p.status = harness.ExitStatus{Code: -1, Signal: p.signal}
	} else {
		p.status = harness.ExitStatus{Code: code}
	}
	close(p.done)
}

// kill ends the process for its users at once: Wait returns (with err if
// not nil, the sandbox having vanished) and the streams close. The
// program's context is cancelled; the goroutine ends when it honours it.
func (p *process) kill(err error) {
	p.mu.Lock()
	if !p.exited {
		p.exited = true
		p.status = harness.ExitStatus{Code: -1, Signal: "killed"}
		p.err = err
		close(p.done)
	}
	p.mu.Unlock()
	p.cancel(ErrKilled)
	p.closeStreams()
}

func (p *process) closeStreams() {
	p.stdout.closeWrite()
	p.stderr.closeWrite()
	if p.stdin != nil {
		p.stdin.closeRead()
	}
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return pipeWriter{p.stdin}
}

func (p *process) Stdout() io.Reader { return pipeReader{p.stdout} }
func (p *process) Stderr() io.Reader { return pipeReader{p.stderr} }

// Wait returns the program's exit status once it has returned or been
// killed; background members may still run. A process of a sandbox that
// vanished reports ErrVanished.
func (p *process) Wait() (harness.ExitStatus, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.err
}

// Signal delivers s to the whole group. Terminate cancels the group's
// context; Kill also ends the process at once (see kill). Signalling an
// ended group does nothing.
func (p *process) Signal(s driver.Signal) error {
	if s == driver.Kill {
		p.mu.Lock()
		if !p.exited {
			p.signal = "killed"
		}
		p.mu.Unlock()
		p.kill(nil)
		return nil
	}
	p.mu.Lock()
	if !p.exited && p.signal == "" {
		p.signal = "terminated"
	}
	p.mu.Unlock()
	p.cancel(ErrTerminated)
	return nil
}

// Close closes the streams: pending and later reads fail, writes by the
// program fail, and stdin reads as ended.
func (p *process) Close() error {
	p.stdout.closeRead()
	p.stderr.closeRead()
	if p.stdin != nil {
		p.stdin.closeWrite()
	}
	return nil
}
