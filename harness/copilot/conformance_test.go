package copilot_test

import (
	"testing"

	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/harness/harnesstest"
)

const goldenDir = "testdata/golden"

func TestConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, copilot.Harness(), goldenDir)
}

func FuzzEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, copilot.Harness(), goldenDir)
}
