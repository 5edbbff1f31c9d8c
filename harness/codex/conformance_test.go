package codex_test

import (
	"testing"

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
}
