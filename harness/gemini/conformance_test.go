package gemini_test

import (
	"testing"

	"github.com/outposthq/outpost/harness/gemini"
	"github.com/outposthq/outpost/harness/harnesstest"
)

const goldenDir = "testdata/golden"

func TestConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, gemini.Harness(), goldenDir)
}

func FuzzEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, gemini.Harness(), goldenDir)
}
