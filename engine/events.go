package engine

import (
	"time"

	"github.com/outposthq/outpost/harness"
)

// seen is what the agent's events and standard error told about how its
// turn ends (classify reads it).
type seen struct {
	finished bool
	failures []string
	// quotaText is the first text the preset's Quota matched, quotaEvent
	// the Details of the failure event it came from.
	quotaText  string
	quotaEvent map[string]any
	// misconfigText is the first text the preset's Misconfigured matched.
	misconfigText string
	limit         *harness.Event // the first failure of kind harness.KindLimit
	unavailable   bool
	// lastFailure and lastStderr are what the preset's patterns said of
	// the last failure event's text and of the last non-blank line of
	// standard error (terminal).
	lastFailure, lastStderr textClass
	// lastRetry is the text of the last retry notice (redacted).
	lastRetry string
	// turnFailed: a failure event of kind harness.KindTurnFailed came.
	turnFailed bool
}

// textClass is what a preset's patterns say of one failure text.
type textClass struct{ quota, unavailable, misconfigured bool }

// terminal is what the preset's patterns said of the turn's terminal
// error, the text a failure quotes: the last failure event's, or without
// one the last non-blank line of standard error.
func (s seen) terminal() textClass {
	if len(s.failures) > 0 {
		return s.lastFailure
	}
	return s.lastStderr
}

// classifyText matches one failure text (an event's, or a stderr line)
// against the preset's patterns. It is pure. Precedence: a text that both
// Unavailable and Misconfigured match is an outage, not a refused setup
// (an overloaded service's 403 page, a proxy's "connection refused ...
// invalid key"); Quota is independent (classify ranks it first).
func classifyText(h *harness.Harness, text string) textClass {
	var c textClass
	c.quota = h.Quota != nil && h.Quota(text)
	c.unavailable = h.Unavailable != nil && h.Unavailable(text)
	c.misconfigured = !c.unavailable && h.Misconfigured != nil && h.Misconfigured(text)
	return c
}

// emit completes an event (agent, time, session, conversation), redacts
// it, records what it says about the turn and hands it to OnEvent.
func (s *stream) emit(ev harness.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.e
	ev.Agent = e.h.Name
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Type == harness.EventSession && ev.Session != "" {
		s.native = ev.Session
	}
	if ev.Session == "" {
		ev.Session = s.native
	}
	ev.Conversation = e.convID
	if !e.o.Raw {
		ev.Raw = nil
	}
	ev.Raw = harness.SafeJSON(ev.Raw)
	if ev.Tool != nil {
		t := *ev.Tool
		t.Input = harness.SafeJSON(t.Input)
		ev.Tool = &t
	}
	e.red.Event(&ev)
	s.record(ev)
	e.trace("event", "event", ev)
	if e.o.OnEvent != nil {
		e.o.OnEvent(ev)
	}
}

// record keeps what ev says about the turn's answer, usage and end. The
// caller holds s.mu.
func (s *stream) record(ev harness.Event) {
	switch ev.Type {
	case harness.EventFinished:
		s.seen.finished = true
		if ev.Text != "" {
			s.final = ev.Text
		}
		if ev.Usage != nil {
			u := *ev.Usage
			s.usage = &u
		}
	case harness.EventUsage:
		if ev.Usage != nil {
			u := *ev.Usage
			s.usage = &u
		}
	case harness.EventFailure:
		s.seen.failures = append(s.seen.failures, ev.Text)
		if ev.Kind == harness.KindTurnFailed {
			s.seen.turnFailed = true
		}
		if ev.Kind == harness.KindLimit && s.seen.limit == nil {
			lim := ev
			s.seen.limit = &lim
			go s.stop("limit") // the budget is spent: end the turn now
		}
		quota := s.seen.quotaText
		s.seen.lastFailure = s.note(ev.Text)
		if quota == "" && s.seen.quotaText != "" {
			s.seen.quotaEvent = ev.Details
		}
	case harness.EventMessage:
		if !ev.Delta && ev.Text != "" {
			s.final = ev.Text
		}
	case harness.EventNotice:
		if ev.Kind == "retry" {
			s.seen.lastRetry = ev.Text
		}
	}
}

// note matches a failure's text (an event's or a stderr line) against the
// preset's patterns, and returns what they said. The caller holds s.mu.
func (s *stream) note(text string) textClass {
	text = harness.ClipText(text)
	c := classifyText(s.e.h, text)
	if s.seen.quotaText == "" && c.quota {
		s.seen.quotaText = text
	}
	if c.unavailable {
		s.seen.unavailable = true
	}
	if s.seen.misconfigText == "" && c.misconfigured {
		s.seen.misconfigText = text
	}
	if c != (textClass{}) {
		s.e.trace("classify text", "text", s.e.red.String(firstLine(text)), "quota", c.quota, "unavailable", c.unavailable, "misconfigured", c.misconfigured)
	}
	return c
}
