package gemini_test

import (
	"testing"

	"github.com/outposthq/outpost/harness/gemini"
	"github.com/outposthq/outpost/harness/harnesstest"
)

// TestACPConformance: gemini-acp passes the preset suite, its recorded
// ACP exchange (the real CLI's side of a shell call and text, against the
// fake Gemini API) decoded into the golden events.
func TestACPConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, gemini.ACP(), "testdata/acp")
}
