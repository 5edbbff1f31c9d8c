package declarative_test

import (
	"testing"

	"github.com/outposthq/outpost/harness"
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

// TestQwenNoRelaunch: both qwen presets keep the CLI to one node process
// a turn (docs/presets/qwen.md: a relaunch doubled its start).
func TestQwenNoRelaunch(t *testing.T) {
	for _, h := range []*harness.Harness{declarative.Qwen(), declarative.QwenACP()} {
		cmd, err := h.Request(harness.Input{Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if got := cmd.Env["QWEN_CODE_NO_RELAUNCH"]; got != "true" {
			t.Errorf("%s: QWEN_CODE_NO_RELAUNCH=%q, want true", h.Name, got)
		}
	}
}
