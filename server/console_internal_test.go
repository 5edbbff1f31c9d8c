package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
)

// TestExchanges: a preset's history is grouped into prompts and answers
// (deltas and tool calls left out; an answer before any prompt, of a
// fork's inherited history, has an empty prompt).
func TestExchanges(t *testing.T) {
	msg := func(kind, text string) harness.Event {
		return harness.Event{Type: harness.EventMessage, Kind: kind, Text: text}
	}
	got := exchanges([]harness.Event{
		msg("", "inherited"), msg(harness.KindUser, "one"), {Type: harness.EventMessage, Text: "par", Delta: true},
		msg("", "first"), {Type: harness.EventToolCall, Text: "ls"}, msg("", "second"), msg(harness.KindUser, "two"),
	})
	want := []Exchange{{Answer: "inherited"}, {Prompt: "one", Answer: "first\n\nsecond"}, {Prompt: "two"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("exchanges (-want +got):\n%s", d)
	}
}

// TestRetainedExchanges: without a preset's history, a conversation's
// prompts and answers are those of its finished turns this replica
// retains, oldest first, the peer's own only.
func TestRetainedExchanges(t *testing.T) {
	t0 := time.Now()
	mk := func(id, owner, conv, prompt, answer string, at time.Duration) *turn {
		line := engine.NewResultLine(&engine.Result{Conversation: conv, Text: answer}, nil)
		return &turn{id: id, owner: owner, created: t0.Add(at), prompt: prompt, state: StateFinished, result: &line}
	}
	s := &Server{turns: map[string]*turn{
		"b": mk("b", "token:alice", "c1", "second", "two", 2), "a": mk("a", "token:alice", "c1", "first", "one", 1),
		"x": mk("x", "token:alice", "c2", "other", "no", 0), "y": mk("y", "token:bob", "c1", "bob's", "no", 3),
		"q": {id: "q", owner: "token:alice", created: t0, state: StateRunning},
	}}
	got := s.retainedExchanges("c1", principal{owner: "token:alice"})
	want := []Exchange{{Prompt: "first", Answer: "one"}, {Prompt: "second", Answer: "two"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("retained exchanges (-want +got):\n%s", d)
	}
}
