package echo

import (
	"encoding/json"
	"io"
	"sync/atomic"

	"github.com/outposthq/outpost/harness"
)

// live drives `outpost echo-agent --live`: user messages are JSON lines on
// stdin; a message sent during a #slow turn is injected into it, one sent
// otherwise is queued as the next turn.
type live struct {
	cmd     harness.Command
	prompt  string
	working atomic.Bool
	pending atomic.Int32 // turns not yet finished
	done    atomic.Bool
}

func (l *live) Command() harness.Command { return l.cmd }

func (l *live) Begin(w io.Writer) error {
	l.pending.Add(1)
	return l.write(w, l.prompt)
}

func (l *live) write(w io.Writer, text string) error {
	b, err := json.Marshal(map[string]string{"type": "user", "text": text})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func (l *live) Decode(b []byte, _ io.Writer) []harness.Event {
	evs := Events(b)
	for _, e := range evs {
		switch e.Type {
		case harness.EventSession:
			l.working.Store(true)
		case harness.EventFinished:
			l.working.Store(false)
			if l.pending.Add(-1) <= 0 {
				l.done.Store(true)
			}
		}
	}
	return evs
}

func (l *live) Send(w io.Writer, text string) (harness.Steer, error) {
	mode := harness.SteerQueued
	if l.working.Load() {
		mode = harness.SteerInjected
	} else {
		l.pending.Add(1)
	}
	return mode, l.write(w, text)
}

func (l *live) Interrupt(w io.Writer) error { return nil }

func (l *live) Done() bool { return l.done.Load() }
