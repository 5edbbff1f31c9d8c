package copilot

import (
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// ACPName is the name of Copilot CLI's ACP preset.
const ACPName = "copilot-acp"

// ACP returns Copilot CLI in its Agent Client Protocol mode
// (docs/presets/copilot-acp.md):
//
//	copilot --acp [--model M] [--allow-all-tools] [extra args]
//
// with this preset's credentials (a GitHub token or a BYOK provider),
// configuration, classifiers, storage and bootstrap (the same pinned
// copilot). --allow-all-tools is passed when the turn's permissions
// option allows everything (the default), so the agent asks nothing.
func ACP() *harness.Harness {
	return acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   Program,
		Args:      []string{"--acp"},
		ModelArgs: []string{"--model", "{model}"},
		AllowArgs: []string{"--allow-all-tools"},
		Reserved:  []string{"-p", "--prompt", "--resume", "--continue", "--output-format", "--allow-all", "--yolo"},
	})
}
