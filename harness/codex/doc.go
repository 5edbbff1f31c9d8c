// Package codex is the preset for OpenAI's Codex CLI (@openai/codex),
// proven against version 0.171.0 with the facts measured in the
// project's cli-facts and the recordings in testdata/golden.
//
// A turn runs
//
//	codex exec [resume|fork] --json --skip-git-repo-check [-m MODEL]
//	           [-s MODE | -c sandbox_mode="MODE"] [-c overrides...]
//	           [extra args...] -- [THREAD_ID] PROMPT
//
// with standard input closed (exec blocks forever on an open one) and a
// private CODEX_HOME, ~/.codex in the sandbox home. With live input
// (engine.RunOptions.Steer) the turn runs through `codex app-server`
// instead (LiveInput): JSON-RPC over standard input and output, turn/steer
// for the messages sent while the agent works, turn/interrupt when the
// caller cancels.
//
// Every exec JSON line and app-server notification is decoded into
// normalized events (see decoder.decode). Exec numbers its items item_0,
// item_1… afresh in every process, so event ids are keyed by turn.
// "Reconnecting..." errors are retry notices; a terminal error and
// turn.failed are one failure. Quota and Unavailable classify the measured
// terminal texts by their beginning (Codex appends the upstream body and a
// request id), and the app-server's codexErrorInfo tags.
//
// Usage: Codex reports a thread's running total (a fork's includes its
// parent's). The turn's own usage (Result.Usage) is the difference between
// the thread's token_usage_record lines after and before the turn
// (TranscriptUsage); the running total is Result.ThreadUsage
// (ThreadUsage). Conversations are the rollouts under ~/.codex/sessions,
// a fork's together with its ancestors' (Storage), so a fork resumes on a
// fresh sandbox.
//
// Options (engine.Turn.Options, `outpost run --option KEY=VALUE`):
//
//	sandbox              read-only (the CLI's default), workspace-write,
//	                     danger-full-access
//	reasoning-effort     model_reasoning_effort
//	request-max-retries  the provider's request_max_retries (default 4)
//	stream-max-retries   the provider's stream_max_retries (default 5)
//	stream-idle-timeout  the provider's stream_idle_timeout_ms ("30s" or ms)
//	provider             the custom provider the three above apply to
//	max-model-requests   the turn's budget of model requests (the CLI has
//	                     no step limit): the turn is stopped when the model
//	                     asks for the N-th tool result
//
// Credentials: OPENAI_BASE_URL with OPENAI_API_KEY (a custom provider
// "outpost" in config.toml, since the CLI ignores the variable), or
// CODEX_API_KEY / OPENAI_API_KEY for the built-in provider, or else the
// host's ChatGPT auth.json copied into sandboxes that take host files,
// exclusively (its refresh token is single-use). Configuration:
// config.toml merged with no update check and no analytics. Guards the CLI
// lacks: the engine's timeout, an inactivity watchdog (Inactivity), the
// max-model-requests budget, and SIGTERM to the whole process group. See
// docs/presets/codex.md.
package codex
