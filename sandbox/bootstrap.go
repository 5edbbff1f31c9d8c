package sandbox

import (
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/sandbox/driver"
)

// installer is the turn's bootstrap installer (RunOptions.Installer or a
// default one).
func (e *engine) installer() *bootstrap.Installer {
	if e.inst == nil {
		e.inst = e.o.Installer
		if e.inst == nil {
			e.inst = &bootstrap.Installer{}
		}
	}
	return e.inst
}

// bootstrapMounts are the mounts a lease made for this turn asks for: the
// bootstrap cache's unpacked CLIs, read-only, when the preset names a
// pinned CLI to download and the provider's sandboxes are isolated. With
// it an install (step 5) copies nothing into the sandbox; a provider that
// cannot mount it ignores it, and the install copies instead.
func (e *engine) bootstrapMounts() []driver.Mount {
	if name := e.h.Bootstrap; name == "" || !e.caps().Isolated || !e.installer().Cached(name) {
		return nil
	}
	host, target, err := e.installer().SharedCache()
	if err != nil {
		return nil // step 5 reports the cache's trouble if it needs it
	}
	return []driver.Mount{{Source: host, Target: target}}
}

// bootstrapProgress delivers an install's progress (step 5) to the caller
// as notice events of kind "bootstrap" (bootstrap.Progress.Event). The
// installer reports from one goroutine at a time, before the agent
// starts, so OnEvent's one-at-a-time contract holds.
func (e *engine) bootstrapProgress(p bootstrap.Progress) {
	if e.o.OnEvent == nil {
		return
	}
	ev := p.Event()
	ev.Agent = e.h.Name
	ev.Conversation = e.convID
	e.red.Event(&ev)
	e.o.OnEvent(ev)
}
