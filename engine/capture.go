package engine

import (
	"context"
	"errors"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// afterAgent runs steps 9 and 10 once the agent has exited: usage by the
// preset's mode and the gateway's meter, then the capture into the store.
// It returns the turn's error with the capture's folded in.
func (e *turnRun) afterAgent(ctx context.Context, lease *sandbox.Lease, res *Result, st *stream, runErr error) error {
	e.usage(ctx, lease, res, st)
	e.meterUsage(res)
	e.clock.step("usage")
	runErr = e.captureStep(ctx, lease, res, st, runErr)
	e.clock.step("capture")
	return runErr
}

// usageTimeout bounds a preset's UsageCommand.
const usageTimeout = 30 * time.Second

// usage is step 9, by the preset's mode (harness.UsageMode):
//
//   - unavailable: nothing is recorded, whatever the events say;
//   - unset: the usage the events reported, taken as complete (no
//     completeness check);
//   - events: the usage the events reported, complete only if they said
//     so (none reported: zero and incomplete);
//   - session: the preset's UsageCommand after exit, over what the events
//     gave (a command that fails leaves that).
//
// Transcript usage (step 10) overrides all but unavailable.
func (e *turnRun) usage(ctx context.Context, lease *sandbox.Lease, res *Result, st *stream) {
	h := e.h
	if h.Usage == harness.UsageUnavailable {
		res.Usage = harness.Usage{}
		return
	}
	if st.usage != nil {
		res.Usage = *st.usage
		if h.Usage == harness.UsageUnset {
			res.Usage.Complete = true
		}
	}
	if h.Usage != harness.UsageSession || h.UsageCommand == nil || st.native == "" || !st.started {
		return
	}
	c := h.UsageCommand(st.native)
	if c == nil {
		return
	}
	req, err := e.execRequest(lease, *c)
	if err != nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), usageTimeout)
	defer cancel()
	r, err := lease.Exec(uctx, req, usageOutputLimit)
	if err == nil && r.Status.Success() {
		if u := h.UsageResult(r.Stdout); u != nil {
			res.Usage = *u
		}
	}
}

// captureStep is step 10: the conversation's files read out of the
// sandbox into the store. The store write itself is deferred to overlap
// with the release (engine.finish) when nothing in this turn needs it
// first. It returns the turn's error with the capture's folded in.
func (e *turnRun) captureStep(ctx context.Context, lease *sandbox.Lease, res *Result, st *stream, runErr error) error {
	if e.refusedTurn() {
		// No call reached the model: the conversation is as it was, and
		// this is no turn of it. A resumed one can be continued.
		if e.t.Resume != "" {
			res.Conversation = e.parent.ID
		}
		return e.afterCapture(res, runErr, nil)
	}
	if !e.h.Captures() || e.o.Store == nil || st.native == "" {
		return e.afterCapture(res, runErr, nil)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.ReleaseTimeout)
	defer cancel()
	put, err := e.capture(cctx, lease, res, st)
	if err != nil {
		return e.afterCapture(res, runErr, err)
	}
	if e.ownLease && st.pendingSteer == "" {
		e.put = put
		return runErr
	}
	if err := put(cctx); err != nil {
		return e.afterCapture(res, runErr, err)
	}
	res.Conversation = e.stored
	return e.afterCapture(res, runErr, nil)
}

// afterCapture folds the capture's outcome into the turn's: a failed
// capture fails a successful turn with code conversation, and is recorded
// in the details of a failed one, never masking its code.
func (e *turnRun) afterCapture(res *Result, runErr, captureErr error) error {
	runErr = e.foldCheckpoint(runErr)
	if captureErr == nil {
		if res != nil && e.stored != "" {
			res.Conversation = e.stored
		}
		return runErr
	}
	if runErr != nil {
		var oe *outpost.Error
		if errors.As(runErr, &oe) {
			oe.Detail("capture_error", captureErr.Error())
			keepSpooled(oe, captureErr)
		}
		return runErr
	}
	return outpost.Wrap(outpost.Conversation, "capture", captureErr)
}

// capture reads the conversation's files out of the sandbox, reads the
// transcript usage from them, and returns the store write to run.
func (e *turnRun) capture(ctx context.Context, lease *sandbox.Lease, res *Result, st *stream) (func(context.Context) error, error) {
	h := e.h
	files, err := conversation.Capture(ctx, lease, h.Storage, st.native)
	if err != nil {
		return nil, err
	}
	if h.TranscriptUsage != nil && h.Usage != harness.UsageUnavailable {
		t := conversation.TranscriptOf(st.native, files)
		if e.parent.ID != "" {
			t.Before = conversation.TranscriptOf(e.parent.Native, e.parentFs).Files
		}
		if u := h.TranscriptUsage(t); u != nil {
			res.Usage = *u
		}
	}
	if h.ThreadUsage != nil {
		if u := h.ThreadUsage(conversation.TranscriptOf(st.native, files)); u != nil {
			res.ThreadUsage = u
		}
	}
	masked := maskFiles(e.red, files)
	e.ws.err = e.checkpointAfter(ctx, lease, res, st.native, masked)
	m := e.meta(lease, res, st.native, files)
	return func(ctx context.Context) error {
		if err := storeTurn(ctx, e.o.Store, e.o.Spool, e.o.StoreRetry, m, masked); err != nil {
			return err
		}
		e.stored = m.ID
		e.nameCheckpoint(ctx)
		return nil
	}, nil
}

// meta is the stored conversation's metadata after this turn.
func (e *turnRun) meta(lease *sandbox.Lease, res *Result, native string, files []conversation.File) conversation.Meta {
	now := time.Now().UTC()
	m := e.parent
	if e.t.Resume == "" {
		m = conversation.Meta{ID: e.convID, Created: now, Parent: res.Parent, Owner: e.o.Owner}
	}
	m.ID = e.convID
	m.Agent = e.h.Name
	m.Native = native
	m.Workdir = lease.Workdir()
	m.Sandbox = lease.Provider().Name()
	m.Model = e.model
	m.Updated = now
	if e.t.Resume == "" {
		m.Turns, m.Usage = 1, res.Usage
	} else {
		m.Turns++
		m.Usage = m.Usage.Add(res.Usage)
	}
	m.Files = make([]string, 0, len(files))
	for _, f := range files {
		m.Files = append(m.Files, f.Path)
	}
	e.meterMeta(&m)
	m.Checkpoints = append([]conversation.Checkpoint(nil), e.parent.Checkpoints...)
	if e.ws.made != nil {
		m.Checkpoints = append(m.Checkpoints, *e.ws.made)
	}
	return m
}

// foldCheckpoint folds a checkpoint that failed after the turn into the
// turn's outcome, once: the conversation is stored all the same, and a
// successful turn fails with the checkpoint's code; a failed one keeps
// its own and records the checkpoint's error in its details.
func (e *turnRun) foldCheckpoint(runErr error) error {
	cpErr := e.ws.err
	if cpErr == nil {
		return runErr
	}
	e.ws.err = nil
	if runErr == nil {
		return cpErr
	}
	var oe *outpost.Error
	if errors.As(runErr, &oe) {
		oe.Detail("checkpoint_error", cpErr.Error())
	}
	return runErr
}
