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
