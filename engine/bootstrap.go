package engine

import (
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// installer is the turn's bootstrap installer (RunOptions.Installer or a
// default one).
func (e *turnRun) installer() *bootstrap.Installer {
	if e.inst == nil {
		e.inst = e.o.Installer
		if e.inst == nil {
			e.inst = &bootstrap.Installer{}
		}
	}
	return e.inst
}

// bootstrapMounts are the mounts a lease made for this turn asks for
// (CacheMounts).
func (e *turnRun) bootstrapMounts() []driver.Mount {
	return sandbox.CacheMounts(e.installer(), e.caps(), e.h.Bootstrap)
}

// bootstrapProgress delivers an install's progress (step 5) to the caller
// as notice events of kind "bootstrap" (bootstrap.Progress.Event). The
// installer reports from one goroutine at a time, before the agent
// starts, so OnEvent's one-at-a-time contract holds.
func (e *turnRun) bootstrapProgress(p bootstrap.Progress) {
	if e.o.OnEvent == nil {
		return
	}
	ev := p.Event()
	ev.Agent = e.h.Name
	ev.Conversation = e.convID
	e.red.Event(&ev)
	e.o.OnEvent(ev)
}
