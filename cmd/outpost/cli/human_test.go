package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
)

// TestHumanSteerOnce: a steering message is shown once, though outpost
// says it delivered it and the agent acknowledges it in the same words;
// an acknowledgement in other words, and a later message, are shown.
func TestHumanSteerOnce(t *testing.T) {
	var out, errb bytes.Buffer
	h := newHumanWriter(&out, &errb)
	steer := func(text string, details map[string]any) {
		h.event(harness.Event{Type: harness.EventNotice, Kind: "steer", Text: text, Details: details})
	}
	steer("fix it", map[string]any{"mode": "injected", "delivered": true}) // outpost's
	steer("fix it", map[string]any{"mode": "injected"})                    // the agent's
	steer("steering message 1 was injected into the running turn", map[string]any{"confirmed": true})
	steer("and the docs", map[string]any{"mode": "injected", "delivered": true})
	want := "· steer: fix it\n· steer: steering message 1 was injected into the running turn\n· steer: and the docs\n"
	if got := errb.String(); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if strings.Count(errb.String(), "fix it") != 1 {
		t.Error("the message was shown twice")
	}
}
