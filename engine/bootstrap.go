package engine

import (
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
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
	e.progressEvent(p.Event())
}

// imageProgress delivers the progress of an image the provider pulls or
// builds while the turn's lease is opened (step 3) as notice events of
// kind "image" (sandbox.ProgressEvent). The provider reports from one
// goroutine at a time, before the agent starts.
func (e *turnRun) imageProgress(p driver.Progress) {
	e.progressEvent(sandbox.ProgressEvent(p))
}

// progressEvent stamps a progress notice with the turn's agent and
// conversation, redacts it and hands it to OnEvent.
func (e *turnRun) progressEvent(ev harness.Event) {
	if e.o.OnEvent == nil {
		return
	}
	ev.Agent = e.h.Name
	ev.Conversation = e.convID
	e.red.Event(&ev)
	e.o.OnEvent(ev)
}
