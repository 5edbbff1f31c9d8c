// Package kit is what agent presets share: the parts every preset of a
// CLI repeats, written once. Presets outside this module import it too;
// the built-in presets (harness/claude, harness/codex, harness/copilot,
// harness/antigravity, harness/echo) use nothing else of outpost but
// package harness.
//
//   - Opening: the checks a Request makes first (a fork the CLI cannot
//     make, a fork without a conversation, a NUL byte in the prompt).
//   - Flags and CheckExtraArgs: refusing extra arguments that would take
//     over what outpost controls (the output format, the conversation, the
//     model, ...), and NUL bytes.
//   - Obj and Parse: the tolerant JSON-line reader. A field of an
//     unexpected type reads as absent instead of failing the whole line, so
//     a CLI update that changes one field's type costs that field only.
//     Marshal encodes without HTML escaping.
//   - Details and ResetsAt: a failure's machine-readable details, set only
//     for the facts present, and the "resets_at" time of a usage limit.
//   - Guard: a decoder that panics on a line gives a "decode_error"
//     notice instead of taking the turn down.
//   - MaxArgPrompt, Inactivity: the limits the presets share; PromptFlag:
//     a prompt as --prompt=TEXT, or on standard input past MaxArgPrompt.
//   - UUID, NewUUID: session ids of CLIs that use UUIDs; InSessionDir:
//     the files of a conversation kept in a directory of its own.
package kit
