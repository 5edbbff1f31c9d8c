package declarative_test

import (
	"testing"

	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/harnesstest"
)

// The recordings of the real CLIs decode to the golden events, and the
// decoders hold up against mutated lines.
func TestQwenConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, declarative.Qwen(), "testdata/qwen")
}

func FuzzQwenEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, declarative.Qwen(), "testdata/qwen")
}

func TestOpenCodeConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, declarative.OpenCode(), "testdata/opencode")
}

func FuzzOpenCodeEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, declarative.OpenCode(), "testdata/opencode")
}
