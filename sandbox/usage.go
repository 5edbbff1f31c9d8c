package sandbox

import (
	"context"
	"time"

	"github.com/outposthq/outpost/harness"
)

// usageTimeout bounds a preset's UsageCommand.
const usageTimeout = 30 * time.Second

// usage is step 9: the turn's usage from its events, or, for presets that
// report it per session, from the preset's UsageCommand. Transcript usage
// (step 10) overrides both. A usage command that fails leaves the usage
// the events gave.
func (e *engine) usage(ctx context.Context, lease *Lease, res *Result, st *stream) {
	h := e.h
	if st.usage != nil {
		res.Usage = *st.usage
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
