package engine_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
)

// TestLimitStopsTheTurn: a decoder built with the turn's Input
// (NewTurnDecoder) that reports a failure of kind harness.KindLimit makes
// the engine stop the agent at once; the turn fails with code process and
// details.limit.
func TestLimitStopsTheTurn(t *testing.T) {
	f := newFixture(t)
	h := echo.Harness()
	request := h.Request // echo takes no options: this test's decoder reads one
	h.Request = func(in harness.Input) (harness.Command, error) { in.Options = nil; return request(in) }
	var sawOption atomic.Bool
	h.NewTurnDecoder = func(in harness.Input) func([]byte) []harness.Event {
		sawOption.Store(in.Options["budget"] == "1")
		return func(line []byte) []harness.Event {
			evs := echo.Events(line)
			for _, ev := range evs {
				if ev.Type == harness.EventToolResult {
					return append(evs, harness.Event{Type: harness.EventFailure, Kind: harness.KindLimit, Text: "budget spent", Details: map[string]any{"limit": "budget"}})
				}
			}
			return evs
		}
	}
	_, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "#tool #slow=400", Options: map[string]string{"budget": "1"}})
	var oe *outpost.Error
	if !asError(err, &oe) || oe.Code != outpost.Process || oe.Details["limit"] != "budget" {
		t.Fatalf("error %v, want process with details.limit", err)
	}
	deltas := 0
	for _, ev := range f.events {
		if ev.Type == harness.EventMessage && ev.Delta {
			deltas++
		}
	}
	if deltas >= 400 {
		t.Errorf("all %d steps ran: the limit did not stop the turn", deltas)
	}
	if !sawOption.Load() {
		t.Error("the decoder did not get the turn's options")
	}
}

// TestThreadUsageInResult: the ThreadUsage hook's total is reported beside
// the turn's own usage.
func TestThreadUsageInResult(t *testing.T) {
	f := newFixture(t)
	h := echo.Harness()
	h.ThreadUsage = func(tr harness.Transcript) *harness.Usage {
		if len(tr.Files) == 0 {
			return nil
		}
		return &harness.Usage{InputTokens: 42, Complete: true}
	}
	res, err := f.run(engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ThreadUsage == nil || res.ThreadUsage.InputTokens != 42 || res.Usage.InputTokens == 42 {
		t.Errorf("usage %+v thread %+v", res.Usage, res.ThreadUsage)
	}
}

// interruptible is the echo agent's live session with an Interrupt that
// writes a message (and ends the slow turn early, as echo does with any
// message it receives while it works).
type interruptible struct {
	harness.Live
	asked atomic.Int32
}

func (l *interruptible) Interrupt(w io.Writer) error {
	l.asked.Add(1)
	_, err := l.Live.Send(w, "stop")
	return err
}

// TestCancelInterruptsALiveTurn: cancelling a live turn first asks the
// session to interrupt its turn; the turn is cancelled.
func TestCancelInterruptsALiveTurn(t *testing.T) {
	f := newFixture(t)
	h := echo.Harness()
	var live *interruptible
	base := h.LiveInput
	h.LiveInput = func(in harness.Input) (harness.Live, error) {
		l, err := base(in)
		if err != nil {
			return nil, err
		}
		live = &interruptible{Live: l}
		return live, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var deltas atomic.Int32
	_, err := engine.Run(ctx, engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "#slow=400", Workdir: f.workdir}, &engine.RunOptions{
		Provider: f.provider,
		Store:    f.store,
		Steer:    make(chan string),
		OnEvent: func(ev harness.Event) {
			if ev.Type == harness.EventMessage && ev.Delta && deltas.Add(1) == 2 {
				cancel()
			}
		},
	})
	if outpost.CodeOf(err) != outpost.Cancelled {
		t.Fatalf("error %v, want cancelled", err)
	}
	if live == nil || live.asked.Load() != 1 {
		t.Errorf("Interrupt was not called once")
	}
}

func asError(err error, target **outpost.Error) bool { return errors.As(err, target) }
