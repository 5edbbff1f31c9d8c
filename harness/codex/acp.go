package codex

import (
	"fmt"
	"slices"
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
//	codex-acp [-c model="M"] [-c approval_policy="untrusted"] [-c sandbox_mode="S"] [extra args]
//
// with this preset's credentials, configuration (the same
// $CODEX_HOME/config.toml: the custom provider pointed at
// OPENAI_BASE_URL), classifiers and storage. approval_policy "untrusted"
// makes the adapter ask before a command Codex does not know as safe
// when the turn's permissions option does not allow everything; the
// option sandbox is the codex preset's (danger-full-access in a docker
// sandbox: Codex's bubblewrap cannot run there).
func ACP() *harness.Harness {
	h := acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   ACPProgram,
		ModelArgs: []string{"-c", `model="{model}"`},
		AskArgs:   []string{"-c", `approval_policy="untrusted"`},
		Options:   map[string]func(string) ([]string, error){OptionSandbox: sandboxArgs},
		Reserved:  []string{"-c", "--config"},
		Bootstrap: ACPName,
	})
	// The adapter puts Codex's error inside its JSON-RPC error's text
	// ("Internal error: exceeded retry limit, last status: 429 …"), where
	// the JSONL preset's patterns, anchored at the start, miss it.
	// The adapter's Codex writes no token_usage_record lines in its
	// rollout (measured: codex-acp 0.16.0's two-call turn read as zero
	// and complete): the rollout says nothing of the usage, which stays
	// unreported (incomplete).
	h.TranscriptUsage, h.ThreadUsage = nil, nil
	quota := h.Quota
	h.Quota = func(s string) bool { return quota(s) || strings.Contains(s, "exceeded retry limit, last status: 429") }
	return h
}

// sandboxArgs are codex-acp's arguments for the sandbox option.
func sandboxArgs(mode string) ([]string, error) {
	if !slices.Contains(SandboxModes, mode) {
		return nil, fmt.Errorf("unknown value %q (known: %s)", mode, strings.Join(SandboxModes, ", "))
	}
	return []string{"-c", "sandbox_mode=" + tomlString(mode)}, nil
}
