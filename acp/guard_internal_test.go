package acp

import (
	"log/slog"
	"testing"
	"time"
)

// TestWaitIdleNoGrace: with no grace (or its timer firing before the
// wait began) waitIdle returns at once with a request pending. The timer
// of a zero grace could fire before waitIdle reset its flag, which then
// waited for the request's answer: under load `outpost acp` with no grace
// let a turn read before the end of input run to its end (acp
// TestEndOfInput, 52 s, end_turn instead of cancelled).
func TestWaitIdleNoGrace(t *testing.T) {
	g := newGuard(1<<20, slog.New(slog.DiscardHandler))
	g.pending["1"] = true
	for i := range 2000 {
		done := make(chan bool, 1)
		go func() { done <- g.waitIdle(0) }()
		select {
		case idle := <-done:
			if idle {
				t.Fatalf("wait %d: idle with a request pending", i)
			}
		case <-time.After(time.Minute):
			t.Fatalf("wait %d: waitIdle(0) waited for the pending request's answer", i)
		}
	}
}
