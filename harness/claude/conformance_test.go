package claude_test

import (
	"testing"

	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/harnesstest"
)

const goldenDir = "testdata/golden"

func TestConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, claude.Harness(), goldenDir)
}

func FuzzEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, claude.Harness(), goldenDir)
}
