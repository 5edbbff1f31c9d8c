// Package output turns an agent's final message into a structured answer
// an orchestrator can act on, whatever the agent CLI.
//
//   - Schema: a JSON Schema (draft 2020-12, compiled by
//     github.com/santhosh-tekuri/jsonschema/v6) that a turn's answer must
//     match. A schema that is not JSON, not a valid schema, or over
//     MaxSchema bytes is refused with ErrSchema.
//   - Extract: the last JSON value of a final message: the last fenced
//     ```json block, else the last balanced top-level object or array,
//     bounded (MaxText, MaxValue) and safe on invalid UTF-8.
//   - Check: extraction and validation in one step, giving the value or
//     the problems (JSON pointer and message) a repair message names.
//   - RepairMessage and Instruction: the texts outpost sends the model, to
//     ask for the shape (CLIs without native schema support) and to ask for
//     a corrected answer (response repair).
//   - Protocol: the built-in result/handoff protocol of team-of-agents
//     orchestrators: a schema with its own extraction (the last fenced
//     block, with a fallback result made of the text's first paragraph
//     and the paths the text mentions, MentionedPaths). The agent's own
//     list of changed files is kept as a claim beside outpost's.
//   - Diff: the files a turn created, modified or deleted, computed from
//     two workspace snapshots (snapshot), never from the
//     agent's claim.
//
// The package does no I/O of its own: the turn engine (package sandbox)
// calls it. See docs/output.md.
package output
