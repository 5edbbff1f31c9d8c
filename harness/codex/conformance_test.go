package codex_test

import (
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"

	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/harnesstest"
)

const goldenDir = "testdata/golden"

// TestConformance runs the preset conformance suite on the Codex preset
// with the exec recordings of the real codex 0.171.0.
func TestConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, codex.Harness(), goldenDir)
}

// FuzzEvents: no line makes a decoder or classifier panic, and every event
// serializes; seeded with every line of the recordings.
func FuzzEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, codex.Harness(), goldenDir)
}

// TestACPPreset: codex-acp installs its own adapter's pin and still
// reads the adapter's wrapped 429 as quota.
func TestACPPreset(t *testing.T) {
	h := codex.ACP()
	if h.Name != codex.ACPName || h.Bootstrap != codex.ACPName {
		t.Errorf("ACP preset %q installs %q, want its own pin %q", h.Name, h.Bootstrap, codex.ACPName)
	}
	if !h.Quota("Internal error: exceeded retry limit, last status: 429 Too Many Requests") {
		t.Error("the adapter's wrapped 429 is not quota")
	}
	if h.TranscriptUsage != nil || h.ThreadUsage != nil {
		t.Error("codex-acp reads usage from a rollout that has none")
	}
}

// TestACPCommand: codex-acp asks before unknown commands unless the turn
// allows everything, and takes the codex preset's sandbox option.
func TestACPCommand(t *testing.T) {
	h := codex.ACP()
	for _, c := range []struct {
		opts map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"permissions": "ask"}, `-c approval_policy="untrusted"`},
		{map[string]string{"permissions": "read", "sandbox": "danger-full-access"}, `-c approval_policy="untrusted" -c sandbox_mode="danger-full-access"`},
	} {
		cmd, err := h.Request(harness.Input{Prompt: "hi", Options: c.opts})
		if got := strings.Join(cmd.Args, " "); err != nil || got != c.want {
			t.Errorf("%v: args %q, %v; want %q", c.opts, got, err, c.want)
		}
	}
	if _, err := h.Request(harness.Input{Prompt: "hi", Options: map[string]string{"sandbox": "none"}}); err == nil || !strings.Contains(err.Error(), "danger-full-access") {
		t.Errorf("an unknown sandbox mode: %v", err)
	}
}
