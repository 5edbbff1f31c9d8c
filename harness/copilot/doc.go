// Package copilot is the preset for the GitHub Copilot CLI
// (@github/copilot), proven against version 1.0.102 with the
// facts measured in the project's cli-facts and the recordings in
// testdata/golden.
//
// A turn runs
//
//	copilot --prompt=PROMPT --output-format json --no-auto-update
//	        --no-ask-user (--session-id=NEW | --resume=ID) [--model=M]
//	        [--reasoning-effort=E] [--max-ai-credits=N]
//	        (--allow-all-tools | --allow-all) [extra args...]
//
// with its standard input closed (prompts over MaxArgPrompt bytes are
// written to it instead of --prompt), COPILOT_HOME=<home>/.copilot and
// COPILOT_AUTO_UPDATE=false, so a pinned CLI stays pinned. Outpost mints
// the id of a new session (Command.Session): the engine knows it before
// the CLI prints anything, and resumes by full id, never with --continue.
//
// The JSONL lines are decoded by type (see Decoder): message and
// reasoning deltas, complete messages, tool calls and results, retries as
// notices (a retry voids the partial deltas of the failed attempt), the
// CLI's session.error as a failure, and the final result line as the
// finished event the preset requires. Failures are classified from the
// error type the CLI gives (rate_limit and quota: the turn fails with code
// quota and details.resets_at when the message says how long to wait;
// query with a 5xx, refused or broken connection: process with
// details.unavailable) — the process exit code is 1 in every failure.
//
// Usage (mode session) comes from the session log, which records every
// model call: after the turn a bounded read in the sandbox sums the records
// since the CLI's last start (UsageCommand, UsageResult), and once the
// conversation is captured, the records that were not in the restored log
// (TranscriptUsage). Conversations are the directories
// ~/.copilot/session-state/<id>/ (Storage); they resume on any sandbox.
// The CLI cannot fork in print mode, so the preset is not forkable: a fork
// is refused before any sandbox is allocated.
//
// Options (engine.Turn.Options, `outpost run --option KEY=VALUE`):
//
//	permissions       tools (default: --allow-all-tools) or all
//	                  (--allow-all: tools, paths and URLs)
//	reasoning-effort  none, minimal, low, medium, high, xhigh or max
//	max-ai-credits    a positive number, the session's AI credit budget
//
// Credentials: the first of COPILOT_GITHUB_TOKEN, GH_TOKEN and GITHUB_TOKEN
// that is not a classic token (ghp_, which the CLI refuses), and the BYOK
// secrets COPILOT_PROVIDER_API_KEY, _BEARER_TOKEN, _API_KEY_COMMAND and
// _HEADERS. Configuration: the BYOK provider settings, COPILOT_OFFLINE,
// COPILOT_MODEL, GH_HOST, COPILOT_GH_HOST and COPILOT_PKG_CACHE_HOME pass
// through when set. See docs/presets/copilot.md.
package copilot
