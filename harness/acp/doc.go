// Package acp runs agents that speak the Agent Client Protocol (ACP,
// JSON-RPC 2.0 over standard input and output) as outpost presets: outpost
// is the ACP client of an agent it starts in the sandbox.
//
// A turn is
//
//	initialize → session/new | session/resume | session/load → session/prompt
//	→ session/update notifications … → the prompt's response (its stop reason)
//
// and the notifications become outpost's normalized events (docs/events.md):
// agent_message_chunk a message delta, agent_thought_chunk reasoning,
// tool_call and a terminal tool_call_update a tool call and its result,
// plan and usage_update notices. A steering message is a new
// session/prompt on the same session once the running one ends (ACP runs
// one prompt at a time), or, with the option steer=interrupt, after a
// session/cancel; cancelling the turn is session/cancel. The agent's
// session/request_permission requests are answered by the turn's
// permissions option (allow, deny, or a list of ACP tool kinds). Outpost
// advertises neither the file-system nor the terminal client capability,
// so the agent uses its own tools inside the sandbox; a request for them
// is answered "method not found".
//
// Preset wraps an existing preset of the same CLI (its credentials,
// configuration, classifiers, storage and bootstrap) into its ACP mode;
// the declarative package builds the same from a file with
// "protocol": "acp". The protocol's types (every method's parameters and
// results, the session/update union, stop reasons) are those of
// github.com/coder/acp-go-sdk; its connection is not used, because the
// engine already owns the agent's standard input and output line by line
// (bounded lines, the watchdog, raw lines, redaction), which a second
// reader would bypass (docs/presets/acp.md).
package acp
