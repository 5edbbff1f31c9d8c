package claude

import (
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// ACP preset names and programs: Claude Code through Zed's ACP adapter,
// @zed-industries/claude-code-acp, which runs the Claude Agent SDK (and
// the Claude Code the SDK carries, not the pinned claude).
const (
	ACPName    = "claude-acp"
	ACPProgram = "claude-code-acp"
)

// ACP returns Claude Code driven through its ACP adapter
// (docs/presets/claude-acp.md):
//
//	claude-code-acp
//
// with this preset's credentials (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL:
// the SDK's Claude Code reads them), configuration, classifiers and
// storage (~/.claude/projects). The adapter takes no arguments: no model
// and no approval mode on its command line, so a turn's model is refused
// and every tool the agent asks for is answered by the permissions
// option.
func ACP() *harness.Harness {
	return acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   ACPProgram,
		Bootstrap: ACPName,
		// As root the adapter's Claude Code refuses its own
		// --dangerously-skip-permissions, and session/new fails, unless
		// told it runs in a sandbox (it does).
		Env: map[string]string{"IS_SANDBOX": "1"},
	})
}
