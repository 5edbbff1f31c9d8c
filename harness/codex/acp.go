package codex

import (
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// ACP preset names and programs: Codex through Zed's ACP adapter,
// @zed-industries/codex-acp, a native binary built on Codex's own crates
// (not the pinned codex).
const (
	ACPName    = "codex-acp"
	ACPProgram = "codex-acp"
)

// ACP returns Codex driven through its ACP adapter
// (docs/presets/codex-acp.md):
//
//	codex-acp [-c model="M"] [extra args]
//
// with this preset's credentials, configuration (the same
// $CODEX_HOME/config.toml: the custom provider pointed at
// OPENAI_BASE_URL), classifiers and storage.
func ACP() *harness.Harness {
	h := acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   ACPProgram,
		ModelArgs: []string{"-c", `model="{model}"`},
		Reserved:  []string{"-c", "--config"},
		Bootstrap: ACPName,
	})
	// The adapter puts Codex's error inside its JSON-RPC error's text
	// ("Internal error: exceeded retry limit, last status: 429 …"), where
	// the JSONL preset's patterns, anchored at the start, miss it.
	quota := h.Quota
	h.Quota = func(s string) bool { return quota(s) || strings.Contains(s, "exceeded retry limit, last status: 429") }
	return h
}
