package gemini

import (
	"maps"
	"slices"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// ACPName is the name of Gemini CLI's ACP preset.
const ACPName = "gemini-acp"

// ACP returns Gemini CLI run in its Agent Client Protocol mode
// (docs/presets/acp.md):
//
//	gemini --acp --skip-trust [--model M] [--approval-mode yolo] [extra args]
//
// with this preset's credentials, configuration, classifiers, storage (the
// same chat files: a conversation moves between the two presets) and fork
// step. --approval-mode yolo is passed when the turn's permissions option
// allows everything (the default), so the agent asks nothing; otherwise it
// asks and the option answers.
func ACP() *harness.Harness {
	return acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   Program,
		Args:      []string{"--acp", "--skip-trust"},
		ModelArgs: []string{"--model", "{model}"},
		AllowArgs: []string{"--approval-mode", "yolo"},
		Reserved:  slices.Sorted(maps.Keys(reserved)),
	})
}
