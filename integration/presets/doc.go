// Package presets holds the end-to-end tests of the presets added last —
// Gemini CLI, Qwen Code and OpenCode — run with their real CLIs against
// the fake model APIs, on the local sandbox and on Docker. They are a
// package of their own so that go test runs them beside the rest of
// integration/ (their CLIs' retries and bootstraps are mostly waiting).
package presets
