// Package server is outpost's HTTP API: the service `outpost serve` runs
// so that orchestrators in any language can start turns, follow their
// events over Server-Sent Events, steer and cancel them, and read
// conversations, without spawning `outpost run --json` per turn.
//
// The API is versioned under /v1 and described by an OpenAPI 3.1 document
// (openapi.json, served at /v1/openapi.json) that tests validate every
// handler against. Its shapes are those of the `--json` wire contract
// (docs/events.md): a turn's stream is harness.Event values followed by
// one engine.ResultLine, each with a sequence number, so one decoder
// reads both. Errors are one JSON shape, {"error": outpost.ErrorJSON},
// with HTTP statuses mapped from the codes (docs/serve.md).
//
// Turns run through a sandbox.Pool: each takes a sandbox opened and
// bootstrapped in advance, uses it once and destroys it. The server
// bounds what it accepts (concurrent turns, a queue, then 429; body
// sizes, 413; header and idle timeouts; a per-turn timeout ceiling),
// drains on Shutdown (new turns refused, running ones finish within a
// grace period and are then cancelled, every conversation captured),
// exposes Prometheus metrics and logs with log/slog. Authentication is
// the listener's: peer credentials on a Unix socket (PeerCredListener),
// bearer tokens on TCP (Tokens).
//
// Every request has a peer (policy.go): an operator (the server's own uid
// on the socket, a token marked operator, any caller of a server without
// tokens) or a client. A client sees only the turns and conversations it
// made (conversation.Meta.Owner, turnstore.Turn.Client; another's are 404)
// and asks only what Options.Policy and its token's fields allow
// (secrets and egress modes, allowlist entries, variables; 403, reason
// policy) (docs/serve.md, Policy and tenancy).
//
// Workspaces travel with the conversation (docs/workspaces.md): a turn
// may run in a fresh workspace ("new") holding the files of the
// checkpoint it continues, with a check; GET /v1/conversations/{id}/diff
// shows what a turn changed; POST /v1/races runs engine.Race, its
// contestants taking the server's turn slots, its progress streamed
// while the request lasts (race.go).
//
// The same turns are offered to MCP clients (Server.MCP, on the official
// Go SDK): at /mcp over streamable HTTP, behind the same authentication,
// and over stdio by `outpost mcp` (docs/mcp.md).
package server
