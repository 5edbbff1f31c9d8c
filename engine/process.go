package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// stream runs the agent process (step 7) and turns its output into
// events. Its parts: the standard input (stdin.go), the watchdog
// (watchdog.go), the steerer (steer.go), the output pumps (pumps.go) and
// the events they emit (events.go); the outcome goes to classify.
type stream struct {
	e      *turnRun
	lease  *sandbox.Lease
	live   harness.Live
	in     harness.Input
	decode func([]byte) []harness.Event // the preset's decoder for this turn

	job      *sandbox.Job
	grace    time.Duration // the job's, between its SIGTERM and SIGKILL
	stdin    *stdin
	gate     chan struct{} // closed when the pumps may read
	discard  atomic.Bool   // the pumps drop the output: the turn never began
	activity chan struct{} // a line was read (watchdog)
	exited   chan struct{} // closed once the process exited and drained
	stopOnce sync.Once
	endOnce  sync.Once
	// stopReason is why stop was called: "inactivity", "steer", "limit",
	// "over" (a live turn that is over, its agent lingering).
	stopReason atomic.Value

	mu      sync.Mutex // guards what the events record, below
	native  string
	final   string
	usage   *harness.Usage
	exit    *harness.ExitStatus
	seen    seen
	started bool
	steered int
	// pendingSteer are the messages a preset without live input resumes
	// with once the stopped turn is captured.
	pendingSteer string

	stderrMu   sync.Mutex
	stderrTail []string

	retryState
	questions atomic.Int32 // permission questions open (harness.Asking)
}

func newStream(e *turnRun, lease *sandbox.Lease, live harness.Live, in harness.Input, cmd harness.Command) *stream {
	s := &stream{e: e, lease: lease, live: live, in: in, native: in.Conversation,
		gate: make(chan struct{}), activity: make(chan struct{}, 1), exited: make(chan struct{}),
		retryState: retryState{retries: make(chan struct{}, 1)}}
	if in.Fork && e.h.Fork == nil {
		s.native = "" // the fork's id arrives with its session event
	}
	if cmd.Session != "" {
		s.native = cmd.Session // the preset chose it
	}
	s.decode = e.h.Events
	if e.h.NewTurnDecoder != nil {
		s.decode = e.h.NewTurnDecoder(in)
	} else if e.h.NewDecoder != nil {
		s.decode = e.h.NewDecoder()
	}
	return s
}

// run starts the agent, feeds and watches it until it exits, and returns
// the classified outcome (step 8).
func (s *stream) run(ctx context.Context, cmd harness.Command) error {
	if err := s.start(ctx, cmd); err != nil {
		return err
	}
	s.asking(ctx)
	if err := s.feed(cmd); err != nil {
		s.discard.Store(true)
		close(s.gate)
		s.job.Kill()
		s.job.Wait()
		return outpost.Wrap(outpost.Process, "start", err)
	}
	go s.watch(ctx)
	if s.e.o.Steer != nil {
		go s.steer()
	}
	close(s.gate)
	status, waitErr := s.job.Wait()
	close(s.exited)
	s.stdin.close()
	s.mu.Lock()
	s.exit = &status
	s.mu.Unlock()
	o := s.outcome(ctx, status, waitErr)
	err := classify(o)
	s.e.trace("classify", "exit_code", status.Code, "signal", status.Signal, "stop", o.stopReason, "failures", len(o.seen.failures),
		"quota", o.seen.quotaText != "", "misconfigured", o.seen.misconfigText != "", "unavailable", o.seen.unavailable, "finished", o.seen.finished, "code", string(outpost.CodeOf(err)))
	return err
}

// asking gives a live session whose agent asks permissions the caller's
// answer (RunOptions.Permission).
func (s *stream) asking(ctx context.Context) {
	a, ok := s.live.(harness.Asker)
	if !ok || s.e.o.Permission == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() { <-s.exited; cancel() }() // an open question ends with the agent
	a.Asking(ctx, harness.Asking{
		Ask:   s.e.o.Permission,
		Write: s.stdin.write,
		Emit:  s.emit,
		Begin: func() { s.questions.Add(1) },
		End:   func() { s.questions.Add(-1); s.alive() },
	})
}

// start launches the agent's process, its pumps waiting at the gate.
func (s *stream) start(ctx context.Context, cmd harness.Command) error {
	e, lease := s.e, s.lease
	req, err := e.execRequest(lease, cmd)
	if err != nil {
		return err
	}
	req.Stdin = cmd.KeepStdin || len(cmd.Stdin) > 0 || s.live != nil
	if req.Stdin && !lease.Capabilities().Stdin {
		return outpost.Errorf(outpost.Configuration, "start", "the %s sandbox cannot give the agent a standard input", lease.Provider().Name())
	}
	grace := e.o.Grace
	if grace <= 0 {
		grace = sandbox.DefaultGrace
	}
	job, err := lease.Launch(ctx, req, &sandbox.JobOptions{Stdout: s.gated(s.pumpStdout), Stderr: s.gated(s.pumpStderr), Grace: grace})
	if err != nil {
		serr := outpost.Wrap(outpost.Sandbox, "start", err)
		var oe *outpost.Error
		if ctx.Err() == nil && sandbox.IsVanished(serr) && errors.As(serr, &oe) {
			sandbox.MarkVanished(oe, "the sandbox vanished before the agent started")
		}
		return serr
	}
	s.job, s.grace, s.stdin = job, grace, &stdin{w: job.Stdin()}
	s.started = true
	if cmd.Session != "" {
		s.emit(harness.Event{Type: harness.EventSession, Session: cmd.Session})
	}
	if p := e.parent.Model; e.parent.ID != "" && e.model != p {
		// --model on a continuation changes the conversation's model.
		s.emit(harness.Event{Type: harness.EventNotice, Kind: "model", Text: fmt.Sprintf("the conversation's model changes from %q to %q", p, e.model),
			Details: map[string]any{"from": p, "to": e.model}})
	}
	return nil
}

// gated holds a pump until the turn is set up, or makes it drop the
// output of a turn that never began.
func (s *stream) gated(pump func(io.Reader)) func(io.Reader) {
	return func(r io.Reader) {
		<-s.gate
		if s.discard.Load() {
			io.Copy(io.Discard, r)
			return
		}
		pump(r)
	}
}

// over closes the input of a live turn that is over, and stops the agent
// when it has not exited a grace period later: ACP adapters keep running
// on a closed input (measured: claude-code-acp 0.16.2, codex-acp 0.16.0).
func (s *stream) over() {
	s.stdin.close()
	s.endOnce.Do(func() {
		go func() {
			t := time.NewTimer(s.grace)
			defer t.Stop()
			select {
			case <-s.exited:
			case <-t.C:
				s.stop("over")
			}
		}()
	})
}

// stop ends the process: its input is closed, its group terminated, then
// killed after the grace period. The first reason given is kept.
func (s *stream) stop(reason string) {
	s.stopOnce.Do(func() {
		if reason != "" {
			s.stopReason.Store(reason)
		}
		s.stdin.close()
		s.job.Stop()
	})
}
