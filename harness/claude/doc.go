// Package claude is the preset for Anthropic's Claude Code CLI
// (@anthropic-ai/claude-code), proven against version 2.1.332
// with the facts measured in the project's cli-facts and the recordings in
// testdata/golden.
//
// A turn runs
//
//	claude -p --output-format stream-json --verbose [--model=M]
//	       [--resume ID [--fork-session]] [--permission-mode MODE]
//	       [--include-partial-messages] [extra args...] -- PROMPT
//
// with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 and DISABLE_AUTOUPDATER=1,
// so a pinned CLI stays pinned and talks to nothing but the model API. The
// prompt comes after "--", where no variadic flag (--allowedTools, ...) can
// swallow it; prompts over MaxArgPrompt bytes go through standard input.
// With live input (engine.RunOptions.Steer) the CLI reads user messages as
// stream-json lines on its standard input instead.
//
// Every stream-json line type is decoded into normalized events (see
// Events); a result with is_error, and the CLI's synthetic "<synthetic>"
// assistant line for API errors, are failures. Usage is the result line's
// per-turn usage, and after capture the session transcript's usage, deduped
// by message id (TranscriptUsage). Conversations are the session files under
// ~/.claude/projects/<slug>/<id>.jsonl (Storage), restored into the slug of
// the new working directory so --resume works on any sandbox.
//
// Options (engine.Turn.Options, `outpost run --option KEY=VALUE`):
//
//	permission-mode   default, manual, acceptEdits, auto, dontAsk, plan or
//	                  bypassPermissions (which also sets IS_SANDBOX=1: the
//	                  CLI refuses it as root otherwise)
//	max-retries       CLAUDE_CODE_MAX_RETRIES, retries of a failed API call
//	                  (the CLI's default is 10, minutes of backoff)
//	api-timeout       API_TIMEOUT_MS, as a Go duration ("30s") or in ms
//	partial-messages  "true": stream text and reasoning deltas
//	                  (--include-partial-messages)
//
// Credentials: ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or
// CLAUDE_CODE_OAUTH_TOKEN as variables; without any of them, the host's
// ~/.claude/.credentials.json is copied into sandboxes that take host files
// (never the local one). Configuration: ~/.claude/settings.json is merged
// with outpost's defaults and the JSON object in OUTPOST_CLAUDE_SETTINGS;
// ANTHROPIC_BASE_URL passes through. See docs/presets/claude.md.
package claude
