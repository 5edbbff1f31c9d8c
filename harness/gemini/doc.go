// Package gemini is the preset of Google's Gemini CLI
// (@google/gemini-cli, pinned in bootstrap/pins.json): headless turns with
// --output-format stream-json, sessions minted with --session-id and
// continued with --resume, forks made by copying the chat log under a new
// id, API-key authentication with GEMINI_API_KEY and an endpoint moved by
// GOOGLE_GEMINI_BASE_URL. It is written in Go rather than as a
// declarative file for two things a declarative file must not do: the
// storage's placement of a chat file under the project of the turn's
// working directory, and the fork step run inside the sandbox. See
// docs/presets/gemini.md for what was measured.
package gemini
