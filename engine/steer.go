package engine

import (
	"context"
	"io"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// steer delivers the caller's messages (RunOptions.Steer) until the
// process exits: into the live session when there is one, otherwise by
// stopping the turn to resume it with them (resumeWith).
func (s *stream) steer() {
	for {
		select {
		case <-s.exited:
			return
		case msg, ok := <-s.e.o.Steer:
			if !ok {
				return
			}
			if s.live != nil {
				s.deliver(msg)
				continue
			}
			s.mu.Lock()
			if s.pendingSteer != "" {
				s.pendingSteer += "\n\n"
			}
			s.pendingSteer += msg
			s.mu.Unlock()
			s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: msg, Details: map[string]any{"mode": string(harness.SteerResumed), "delivered": true}})
			s.stop("steer")
		}
	}
}

// deliver writes msg into the live session and reports it as a notice.
func (s *stream) deliver(msg string) {
	var mode harness.Steer
	err := s.stdin.write(func(w io.Writer) error {
		var err error
		mode, err = s.live.Send(w, msg)
		return err
	})
	if err != nil {
		s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: "message not delivered: " + err.Error(), Details: map[string]any{"delivered": false}})
		return
	}
	s.mu.Lock()
	s.steered++
	s.mu.Unlock()
	s.emit(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: msg, Details: map[string]any{"mode": string(mode), "delivered": true}})
}

// resumeWith continues a turn that was stopped to take a steering message
// (presets without live input).
func (e *turnRun) resumeWith(ctx context.Context, lease *sandbox.Lease, prev *Result, msg string) (*Result, error) {
	if prev.Conversation == "" || !e.h.Resumes() {
		return prev, outpost.Errorf(outpost.Refused, "steer", "agent %s cannot take a message while it works, and its conversation cannot be resumed", e.h.Name)
	}
	t := e.t
	t.Prompt, t.Resume, t.Fork, t.Timeout = msg, prev.Conversation, "", 0
	o := *e.o
	o.Lease = lease
	next := &turnRun{t: t, o: &o, red: e.red, hold: e.hold, outerKl: &e.kl}
	next.ans.inner = true // the outer turn checks the answer
	res, err := next.run(ctx)
	if e.hold == nil {
		e.hold = next.hold // released when this turn's Run ends
	}
	if res != nil {
		res.Usage = prev.Usage.Add(res.Usage)
		res.Steered += prev.Steered + 1
		if prev.Parent != "" {
			res.Parent = prev.Parent
		}
	}
	return res, err
}
