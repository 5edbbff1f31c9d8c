// Package antigravity is the preset for Google's Antigravity CLI, agy,
// built from published material only: the CLI is not on npm and could not
// be installed or run where outpost is developed. Every fact it relies on
// comes from Google's documentation or from third-party integrations that
// wrap agy 1.2.x (docs/presets/antigravity.md lists them and what is
// unverified). Its tests run a scripted stand-in (testdata/agy) that
// reproduces the published output through the real engine.
//
// A turn runs
//
//	agy -p PROMPT --output-format stream-json --print-timeout 30m [--model M]
//	    [--effort E] (--dangerously-skip-permissions | --mode M | --sandbox)
//	    [--conversation ID] [extra args...]
//
// with standard input closed and AGY_CLI_DISABLE_AUTO_UPDATE=1, so a pinned
// CLI stays pinned. The NDJSON lines, keyed by "event", are decoded by
// Decoder: init gives the session (agy chooses conversation ids), step
// updates give message deltas and tool calls and results, and the result
// line gives the finished event (RequiresFinishedEvent: agy before 1.2.6
// exited 0 with no output at all on a quota, which must not pass for a
// success). A resumed turn that agy silently turned into a new conversation
// (it does that for an id it cannot find) fails with kind resume_lost.
//
// Failures: agy exits 3 and writes an AGY_ERROR JSON line on standard error
// (ParseError); RESOURCE_EXHAUSTED (or code 429) is a usage limit (code
// quota, details.resets_at from "Resets in 146h14m2s"), UNAVAILABLE,
// INTERNAL, DEADLINE_EXCEEDED, a 5xx or retryable:true an outage (code
// process, details.unavailable). Usage comes from result.usage (events
// mode). Conversations are the directories
// ~/.gemini/antigravity-cli/brain/<id>/ (Storage). There is no headless
// fork, so the preset is not forkable.
//
// Options (engine.Turn.Options):
//
//	permissions    skip (default), accept-edits, plan, sandbox or default
//	effort         low, medium, high or max
//	print-timeout  a Go duration for --print-timeout (default 30m)
//
// Credentials: GEMINI_API_KEY when set; otherwise the host's file token
// (~/.gemini/antigravity-cli/antigravity-oauth-token) is copied into
// sandboxes that take host files. Configuration: CLOUD_CODE_URL passes
// through.
package antigravity
