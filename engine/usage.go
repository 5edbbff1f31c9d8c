package engine

import (
	"context"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

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
