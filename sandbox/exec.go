package sandbox

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The bounds of the portable layer's processes. Each is used in one place
// and shared by everything that stops, drains or releases.
const (
	// DefaultGrace is how long a stopped process has between SIGTERM to
	// its group and SIGKILL: Exec's on ctx's end, and a turn's unless
	// RunOptions.Grace says otherwise.
	DefaultGrace = 3 * time.Second
	// DrainLimit bounds the wait for a process's output once it exited and
	// what was left of its group was killed: only a descendant that left
	// the group can hold the streams open longer, and they are then closed.
	// It counts only the time the consumers wait for output that does not
	// come: a consumer still busy with what the process wrote (a slow
	// caller of an 8 MiB answer) is never cut, so nothing written is lost.
	// A descendant that keeps writing a little at a time is cut
	// DrainCeiling after the exit, once the consumers wait on it again.
	DrainLimit = 10 * time.Second
	// DrainCeiling bounds the drain of streams a descendant keeps
	// writing to: after it, a consumer waiting in a read for a tenth of
	// DrainLimit (so the process's own output is read: a read of what is
	// buffered returns at once) is waiting on the descendant.
	DrainCeiling = 6 * DrainLimit
	// DefaultExecLimit is what Exec keeps of each stream by default.
	DefaultExecLimit = 1 << 20
	// ReleaseTimeout bounds a provider's release of a sandbox (Close), and
	// a turn's store write: driver.ReleaseTimeout.
	ReleaseTimeout = driver.ReleaseTimeout

	lookPathLimit = 4 << 10 // `command -v` prints one path
)

// JobOptions configure Launch. Nil means defaults.
type JobOptions struct {
	// Stdout and Stderr consume the process's output streams, each in its
	// own goroutine, until the stream ends. Nil discards the stream. They
	// must read to EOF or an error: the process blocks on a full pipe.
	Stdout, Stderr func(io.Reader)
	// Grace is how long Stop lets the process end between SIGTERM and
	// SIGKILL to its group (default DefaultGrace).
	Grace time.Duration
}

// Job is a process started by Launch whose output is being consumed.
type Job struct {
	l       *Lease
	ctx     context.Context
	p       driver.Process
	grace   time.Duration
	pumps   sync.WaitGroup
	streams [2]*watched // stdout, stderr
	stop    sync.Once
}

// Launch starts req in the sandbox and consumes its output streams with
// opts' functions. The caller must Wait for the job. ctx bounds only the
// start: stop the job with Stop.
func (l *Lease) Launch(ctx context.Context, req driver.ExecRequest, opts *JobOptions) (*Job, error) {
	var o JobOptions
	if opts != nil {
		o = *opts
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	p, err := l.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	j := &Job{l: l, ctx: ctx, p: p, grace: o.Grace}
	for i, c := range []struct {
		r io.Reader
		f func(io.Reader)
	}{{p.Stdout(), o.Stdout}, {p.Stderr(), o.Stderr}} {
		f := c.f
		if f == nil {
			f = func(r io.Reader) { io.Copy(io.Discard, r) }
		}
		w := &watched{r: c.r}
		j.streams[i] = w
		j.pumps.Add(1)
		go func() { defer j.pumps.Done(); defer w.finish(); f(w) }()
	}
	return j, nil
}

// Stdin is the process's standard input, nil unless the request asked
// for it.
func (j *Job) Stdin() io.WriteCloser { return j.p.Stdin() }

// Stop terminates the process's group and kills it after the grace period
// unless it exits first. It returns at once; calling it again does
// nothing.
func (j *Job) Stop() {
	j.stop.Do(func() {
		_ = j.p.Signal(driver.Terminate)
		go func() {
			t := time.NewTimer(j.grace)
			defer t.Stop()
			<-t.C
			_ = j.p.Signal(driver.Kill)
		}()
	})
}

// Kill kills the process's group at once.
func (j *Job) Kill() { _ = j.p.Signal(driver.Kill) }

// Wait waits for the process to exit, then kills what is left of its
// group, so descendants let go of its output, and waits for the output
// consumers to finish. Once every consumer still running has waited
// drainLimit for output that did not come (a descendant that left the
// group holds the streams open), or DrainCeiling after the exit has waited
// a tenth of that (a descendant writes now and then), the streams are
// closed under them. The
// exit status is a value; the error is the sandbox failing (coded like
// every Lease error).
func (j *Job) Wait() (harness.ExitStatus, error) {
	st, err := j.p.Wait()
	exited := time.Now()
	_ = j.p.Signal(driver.Kill)
	drained := make(chan struct{})
	go func() { j.pumps.Wait(); close(drained) }()
	tick := time.NewTicker(drainLimit / 10)
	defer tick.Stop()
	for {
		select {
		case <-drained:
		case now := <-tick.C:
			wait := drainLimit
			if now.Sub(exited) >= drainLimit*(DrainCeiling/DrainLimit) { // DrainCeiling, scaled as tests scale drainLimit
				wait = drainLimit / 10
			}
			if !j.streams[0].idle(now, wait) || !j.streams[1].idle(now, wait) {
				continue
			}
			j.p.Close()
			<-drained
		}
		break
	}
	j.p.Close()
	if err != nil {
		err = j.l.wrap(context.WithoutCancel(j.ctx), "wait", err)
	}
	return st, err
}

// drainLimit is DrainLimit; tests shorten it.
var drainLimit = DrainLimit

// watched is an output stream whose consumer's waiting is timed, so Wait
// can tell a stream held open by a descendant (its consumer waits in Read
// for drainLimit) from one whose consumer is busy with what it read.
type watched struct {
	r    io.Reader
	mu   sync.Mutex
	in   time.Time // when the Read in progress began; zero outside Read
	done bool      // the consumer returned
}

func (w *watched) Read(p []byte) (int, error) {
	w.mu.Lock()
	w.in = time.Now()
	w.mu.Unlock()
	n, err := w.r.Read(p)
	w.mu.Lock()
	w.in = time.Time{}
	w.mu.Unlock()
	return n, err
}

func (w *watched) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// idle: the consumer returned, or it has waited in one Read for wait by
// now.
func (w *watched) idle(now time.Time, wait time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done || (!w.in.IsZero() && now.Sub(w.in) >= wait)
}

// ExecResult is the outcome of Exec.
type ExecResult struct {
	Status harness.ExitStatus
	Stdout []byte
	Stderr []byte
}

// Exec runs a command to completion and collects its output, keeping at
// most limit bytes of each stream (0 = DefaultExecLimit); the rest is
// discarded, never blocking the process. When ctx ends the process group
// is terminated, then killed after DefaultGrace, and the error is coded
// cancelled or timeout.
func (l *Lease) Exec(ctx context.Context, req driver.ExecRequest, limit int) (ExecResult, error) {
	if limit <= 0 {
		limit = DefaultExecLimit
	}
	out, errb := &capped{max: limit}, &capped{max: limit}
	j, err := l.Launch(ctx, req, &JobOptions{Stdout: out.copy, Stderr: errb.copy})
	if err != nil {
		return ExecResult{}, err
	}
	stop := context.AfterFunc(ctx, j.Stop)
	st, err := j.Wait()
	stop()
	res := ExecResult{Status: st, Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, ctxError(ctx, "exec", ctx.Err())
	}
	return res, nil
}

// capped keeps the first max bytes written. It does not embed
// bytes.Buffer: the promoted ReadFrom would let io.Copy bypass Write.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Bytes() []byte { return c.buf.Bytes() }

func (c *capped) copy(r io.Reader) { io.Copy(c, r) }

func (c *capped) Write(b []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}
