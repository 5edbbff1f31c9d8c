package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
)

// RunTurnArgs are the arguments of the MCP tool run_turn: a turn as
// POST /v1/turns takes it, in the names a model guesses.
type RunTurnArgs struct {
	Prompt  string `json:"prompt" jsonschema:"the task for the agent"`
	Agent   string `json:"agent,omitempty" jsonschema:"agent preset (list_agents); default: the conversation's when resuming or forking, else the server's default"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox provider the server allows (local, docker, ...); default: the server's first"`
	Image   string `json:"image,omitempty" jsonschema:"container image, for sandboxes that take one (docker, kubernetes)"`
	Model   string `json:"model,omitempty" jsonschema:"model the agent uses; default: the agent's, or the conversation's"`
	// Schema asks for a structured answer: a JSON Schema the agent's
	// answer is validated against (docs/output.md).
	Schema map[string]any `json:"schema,omitempty" jsonschema:"JSON Schema of a structured answer: the validated answer comes back as the result's output"`
	Resume string         `json:"resume,omitempty" jsonschema:"conversation id (or prefix) to continue"`
	Fork   string         `json:"fork,omitempty" jsonschema:"conversation id (or prefix) to continue into a new conversation, leaving it as it was"`
	// Timeout is a Go duration ("90s", "10m"); default and ceiling: the
	// server's.
	Timeout string `json:"timeout,omitempty" jsonschema:"how long the turn may run, a duration such as 90s or 10m; default and ceiling: the server's"`
	// Workspaces (docs/workspaces.md): the request's workspace,
	// checkpoint and check.
	Workspace  string `json:"workspace,omitempty" jsonschema:"new: run in a fresh workspace of the server's holding the files of the checkpoint the turn continues (with fork ID@TURN, that turn's), not in the server's directory"`
	Checkpoint string `json:"checkpoint,omitempty" jsonschema:"on (the default) or off: record the workspace after the turn as a checkpoint that diff, fork and race read"`
	Check      string `json:"check,omitempty" jsonschema:"a shell command run in the sandbox after the turn (e.g. go test ./...); how it ended is the result's check"`
}

// RaceArgs are the arguments of the MCP tool race: POST /v1/races's
// request, in the names a model guesses.
type RaceArgs struct {
	Prompt    string   `json:"prompt" jsonschema:"the task every contestant gets"`
	Agents    []string `json:"agents,omitempty" jsonschema:"agent presets that race (list_agents), each count times; default: the server's default agent"`
	Count     int      `json:"count,omitempty" jsonschema:"turns of each agent (default 1); at most 16 contestants in all"`
	Check     string   `json:"check,omitempty" jsonschema:"shell command run in each contestant's sandbox after its turn (e.g. go test ./...); a contestant passes when it exits 0"`
	Judge     string   `json:"judge,omitempty" jsonschema:"agent preset that picks the winner among the passing contestants after reading their diffs; default: the fewest tokens wins"`
	From      string   `json:"from,omitempty" jsonschema:"start every contestant from this checkpoint, ID or ID@TURN, instead of the server's directory"`
	Model     string   `json:"model,omitempty" jsonschema:"model every agent uses; default: each agent's"`
	Sandbox   string   `json:"sandbox,omitempty" jsonschema:"sandbox provider the server allows; default: the server's first"`
	Image     string   `json:"image,omitempty" jsonschema:"container image, for sandboxes that take one"`
	MaxTokens int64    `json:"max_tokens,omitempty" jsonschema:"each contestant's token budget"`
	Budget    int64    `json:"budget,omitempty" jsonschema:"all contestants' token budget together"`
	Timeout   string   `json:"timeout,omitempty" jsonschema:"how long each contestant's turn may run, a duration such as 10m; default and ceiling: the server's"`
	// AgentOptions are a preset's own options: {"claude":
	// {"permission-mode": "acceptEdits"}} lets Claude Code edit.
	Options      map[string]string            `json:"options,omitempty" jsonschema:"preset options for every contestant"`
	AgentOptions map[string]map[string]string `json:"agent_options,omitempty" jsonschema:"a preset's own options by preset name, e.g. {\"claude\": {\"permission-mode\": \"acceptEdits\"}} so that Claude Code may edit its workspace"`
}

// DiffArgs are the arguments of the MCP tool diff (`outpost diff`).
type DiffArgs struct {
	Ref    string `json:"ref" jsonschema:"the turn: a conversation id (or unique prefix), with @TURN for a turn other than the last (c01abc@2)"`
	To     string `json:"to,omitempty" jsonschema:"compare ref's workspace with this one's (ID or ID@TURN) instead of showing what ref's turn changed"`
	Format string `json:"format,omitempty" jsonschema:"patch (a unified diff, the default), stat (a line a file) or json"`
}

// maxMCPDiff bounds the patch a diff call returns as text; the whole diff
// is at GET /v1/conversations/{id}/diff.
const maxMCPDiff = 256 << 10

// ConversationArgs name a conversation (get_conversation).
type ConversationArgs struct {
	ID string `json:"id" jsonschema:"conversation id, or a unique prefix of one"`
}

// mcpName is outpost's name in MCP's initialize exchange.
const mcpName = "outpost"

// object is the output schema of a tool whose structured content is an
// object: what the tool's description says of its fields, the SDK's
// validation only that it is an object (the answer inside is the
// caller's schema, checked by the engine). Every field has one type
// (never a union with null, never an empty schema), as strict clients
// such as the MCP inspector's strict mode require: a field that may be
// absent is left out, not null.
func object(desc string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "description": desc, "properties": props}
}

// typed is a field's schema: its type and what it holds.
func typed(typ, desc string) map[string]any {
	s := map[string]any{"type": typ}
	if desc != "" {
		s["description"] = desc
	}
	if typ == "array" {
		s["items"] = map[string]any{"type": "object"}
	}
	return s
}

// errorSchema is a tool result's "error", present only when the call or
// its turn failed.
var errorSchema = map[string]any{"type": "object", "description": "outpost's error, only when the call failed: code (docs/errors.md), message, details",
	"properties": map[string]any{"code": typed("string", ""), "message": typed("string", ""), "details": typed("object", "")},
	"required":   []string{"code", "message"}}

// raceInput is race's input schema: the SDK's inference, with agents an
// array (the inference allows null for a Go slice).
func raceInput() *jsonschema.Schema {
	s, err := jsonschema.For[RaceArgs](nil)
	if err != nil {
		panic(err) // a fixed type: fails in every test or never
	}
	if a := s.Properties["agents"]; a != nil {
		a.Type, a.Types = "array", nil
	}
	return s
}

// turnResult is a result line as run_turn's structured content: without
// "error" when the turn succeeded.
type turnResult struct {
	*engine.ResultLine
	Error *outpost.ErrorJSON `json:"error,omitempty"`
}

// MCP returns the Model Context Protocol server of this server's turns
// and conversations (docs/mcp.md): the tools run_turn, race, diff,
// get_conversation, list_conversations and list_agents. `outpost mcp` runs it over stdio;
// the HTTP API serves it at /mcp (streamable HTTP), behind the same
// authentication as the rest. A run_turn's events are sent as progress
// notifications when the call carries a progress token; cancelling the
// call cancels the turn, which ends (its sandbox released) before the
// call returns.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// newMCP builds the MCP server and its tools.
func (s *Server) newMCP() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: mcpName, Title: "outpost: coding agents in sandboxes", Version: s.o.Version}, &mcp.ServerOptions{
		Instructions: "Run coding-agent CLIs (claude, codex, copilot, echo, ...) as turns inside sandboxes. run_turn runs one turn and returns its answer and conversation id; resume or fork that id to continue. diff shows what a turn changed in its workspace; race runs one task as several turns at once, checks each, and names the winner.",
		Logger:       s.log,
	})
	mcp.AddTool(m, &mcp.Tool{
		Name:        "run_turn",
		Title:       "Run an agent turn in a sandbox",
		Description: "Run one turn of a coding agent inside a sandbox and return its answer. The result's conversation id continues it (resume) or branches it (fork). With schema, the agent's answer is validated against it and returned as output. The turn's events stream as progress notifications; cancelling the call cancels the turn.",
		OutputSchema: object("the turn's result line (docs/events.md); with schema, also output: the validated structured answer, any JSON value the schema allows", map[string]any{
			"conversation":  typed("string", "the conversation to resume or fork"),
			"agent":         typed("string", ""),
			"text":          typed("string", "the agent's final message"),
			"usage":         typed("object", "tokens: input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, complete"),
			"changed_files": typed("object", "the files the turn created, modified or deleted"),
			"checkpoint":    typed("object", "the workspace checkpoint the turn recorded"),
			"workdir":       typed("string", "the directory the turn ran in, with workspace new"),
			"check":         typed("object", "how the check ended"),
			"exit_code":     typed("integer", "the exit status outpost run gives this turn (docs/errors.md)"),
			"error":         errorSchema,
		}),
	}, s.runTurnTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:        "race",
		Title:       "Race agents on one task",
		Description: "Run one task as several turns at once (each agent count times), each in its own sandbox and copy of the workspace, run the check in each, and pick the winner: the passing contestant with the fewest tokens, or the judge's pick. Every contestant stays a conversation (resume, fork or diff it). Progress and the contestants' events stream as progress notifications; cancelling the call cancels the race.",
		InputSchema: raceInput(),
		OutputSchema: object("the race's result lines and race line", map[string]any{
			"results": typed("array", "each contestant's result line, with its contestant index"),
			"race":    typed("object", "winner (-1: none passed), conversation (the winner's), contestants, judge, tokens"),
			"error":   errorSchema,
		}),
	}, s.raceTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:        "diff",
		Title:       "Show what a turn changed",
		Description: "The unified diff of what a turn changed in its workspace (its checkpoint against the workspace it started from), or of one turn's workspace against another's (to). format stat gives a line a file, json the files only.",
		OutputSchema: object("the commits compared and the files changed", map[string]any{
			"from":    typed("string", "commit"),
			"to":      typed("string", "commit"),
			"files":   typed("array", "path, action (added, modified, deleted), added and deleted lines"),
			"added":   typed("integer", "lines"),
			"deleted": typed("integer", "lines"),
			"error":   errorSchema,
		}),
	}, s.diffTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "get_conversation",
		Title:        "Show a stored conversation",
		Description:  "The metadata of a stored conversation: agent, model, sandbox, turns, token usage.",
		OutputSchema: object("the conversation's metadata (GET /v1/conversations/{id})", map[string]any{"id": typed("string", ""), "agent": typed("string", ""), "turns": typed("integer", ""), "usage": typed("object", ""), "error": errorSchema}),
	}, s.getConversationTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "list_conversations",
		Title:        "List stored conversations",
		Description:  "The stored conversations, each with its id, agent, turns and usage.",
		OutputSchema: object("the stored conversations", map[string]any{"conversations": typed("array", "each conversation's metadata"), "error": errorSchema}),
	}, s.listConversationsTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "list_agents",
		Title:        "List agent presets",
		Description:  "The agent presets run_turn accepts, as GET /v1/agents lists them: name, pinned CLI version, source, whether the CLI is installed (no download), keyless, and whether they resume, fork and take live input.",
		OutputSchema: object("the agent presets", map[string]any{"agents": typed("array", "name, pinned version, source, installed, keyless, resumable, forkable, live input")}),
	}, s.listAgentsTool)
	return m
}

// mcpHandler serves the MCP server over streamable HTTP.
func (s *Server) mcpHandler() http.Handler {
	return bindMCP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		MaxRequestBodyBytes: s.o.MaxBody,
	}))
}

// request is the turn request of the arguments.
func (a RunTurnArgs) request() (*TurnRequest, error) {
	req := &TurnRequest{Agent: a.Agent, Model: a.Model, Prompt: a.Prompt, Sandbox: a.Sandbox, Resume: a.Resume, Fork: a.Fork,
		Workspace: a.Workspace, Checkpoint: a.Checkpoint, Check: a.Check, Settings: imageSettings(a.Image)}
	if a.Schema != nil {
		b, err := json.Marshal(a.Schema)
		if err != nil {
			return nil, fail(outpost.Configuration, ReasonBadRequest, "schema: "+err.Error())
		}
		req.Schema = b
	}
	ms, err := timeoutMS(a.Timeout)
	if err != nil {
		return nil, err
	}
	req.TimeoutMS = ms
	return req, nil
}

// imageSettings are the sandbox settings of a tool's image argument: nil
// without one.
func imageSettings(image string) map[string]string {
	if image == "" {
		return nil
	}
	return map[string]string{"image": image}
}

// timeoutMS is a tool's timeout argument (a Go duration) in
// milliseconds; "" is 0.
func timeoutMS(timeout string) (int64, error) {
	if timeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d <= 0 {
		return 0, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("timeout %q is not a positive duration such as 90s or 10m", timeout))
	}
	return max(d.Milliseconds(), 1), nil
}

// request is the race request of the arguments.
func (a RaceArgs) request() (*RaceRequest, error) {
	req := &RaceRequest{Prompt: a.Prompt, Agents: a.Agents, Count: a.Count, Check: a.Check, Judge: a.Judge, From: a.From,
		Model: a.Model, Sandbox: a.Sandbox, MaxTokens: a.MaxTokens, Budget: a.Budget, Options: a.Options, AgentOptions: a.AgentOptions,
		Settings: imageSettings(a.Image)}
	ms, err := timeoutMS(a.Timeout)
	if err != nil {
		return nil, err
	}
	req.TimeoutMS = ms
	return req, nil
}

// raceTool runs a race for the call: its progress and its contestants'
// events go as progress notifications (with a progress token), the
// result lines and the race line are the answer. Cancelling the call
// cancels the race, which ends (every contestant's sandbox released,
// its conversation captured) before the call returns.
func (s *Server) raceTool(ctx context.Context, call *mcp.CallToolRequest, args RaceArgs) (*mcp.CallToolResult, any, error) {
	req, err := args.request()
	if err != nil {
		return toolError(err)
	}
	token := call.Params.GetProgressToken()
	rc, err := s.startRace(withCaller(ctx, call), req, token != nil)
	if err != nil {
		return toolError(err)
	}
	sent, seq := 0, 0
	gone := ctx.Done()
	for {
		items, finished, notify := rc.take()
		for _, it := range items {
			seq++
			if !strings.HasPrefix(string(it), `{"type":"race"`) && sendProgress(ctx, call, token, int64(seq), it) {
				sent++
			}
		}
		if finished {
			break
		}
		select {
		case <-notify:
		case <-gone:
			rc.cancel(errClientCancel)
			gone = nil
		}
	}
	<-rc.done
	s.log.Info("outpost mcp: race", "race", rc.id, "progress_token", token != nil, "notified", sent, "cancelled", ctx.Err() != nil)
	if rc.err != nil {
		return toolError(rc.err)
	}
	resp := rc.response()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: raceText(resp)}}}, resp, nil
}

// raceText is a race's outcome as the text a model reads: the winner
// (or none), then a line a contestant.
func raceText(resp RaceResponse) string {
	var b strings.Builder
	r := resp.Race
	if r.Winner >= 0 {
		w := r.Contestants[r.Winner]
		fmt.Fprintf(&b, "winner: contestant %d (%s), conversation %s: diff, resume or fork it", w.Index, w.Agent, w.Conversation)
	} else {
		b.WriteString("no contestant passed")
	}
	if r.Judge != nil && r.Judge.Reason != "" {
		fmt.Fprintf(&b, "\nthe judge: %s", r.Judge.Reason)
	}
	for _, c := range r.Contestants {
		fmt.Fprintf(&b, "\n#%d %s: %s, %d tokens, %d ms, %d file(s) +%d -%d, conversation %s", c.Index, c.Agent, c.Verdict(), c.Tokens, c.DurationMS, c.Files, c.Added, c.Deleted, c.Conversation)
	}
	return b.String()
}

// diffTool shows a turn's diff: as text the patch (bounded by
// maxMCPDiff), the stat or the JSON; as structured content the files.
func (s *Server) diffTool(ctx context.Context, call *mcp.CallToolRequest, args DiffArgs) (*mcp.CallToolResult, any, error) {
	ctx = withCaller(ctx, call)
	format, err := diffFormat(args.Format)
	if err != nil {
		return toolError(err)
	}
	d, err := s.diff(ctx, args.Ref, args.To)
	if err != nil {
		return toolError(err)
	}
	var text string
	switch format {
	case diffStat:
		text = statText(d)
	case diffJSON:
		b, _ := encodeLine(d)
		text = string(b)
	default:
		var buf strings.Builder
		if d.Patch != nil {
			_ = d.Patch.Encode(&buf)
		}
		text = buf.String()
		if len(text) > maxMCPDiff {
			text = fmt.Sprintf("%s\n[the diff is cut here: %d bytes more; format stat lists every file]\n", text[:maxMCPDiff], len(text)-maxMCPDiff)
		}
		if text == "" {
			text = "(no change)"
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, d, nil
}

func (s *Server) runTurnTool(ctx context.Context, call *mcp.CallToolRequest, args RunTurnArgs) (*mcp.CallToolResult, any, error) {
	req, err := args.request()
	if err != nil {
		return toolError(err)
	}
	t, err := s.admit(withCaller(ctx, call), req)
	if err != nil {
		return toolError(err)
	}
	sent := s.follow(ctx, call, t)
	line := t.status().Result
	s.log.Info("outpost mcp: run_turn", "turn", t.id, "progress_token", call.Params.GetProgressToken() != nil, "notified", sent, "cancelled", ctx.Err() != nil)
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answerText(line)}}}
	if line.Error != nil {
		res.IsError = true
	}
	return res, turnResult{line, line.Error}, nil
}

// follow sends the turn's events as progress notifications (when the call
// has a progress token) until it finishes. When ctx ends (the client
// cancelled the call, or went away), the turn is cancelled, and follow
// still waits for its end: the sandbox is released and the conversation
// captured before the call returns. It returns how many notifications it
// sent.
func (s *Server) follow(ctx context.Context, call *mcp.CallToolRequest, t *turn) (sent int) {
	token := call.Params.GetProgressToken()
	var after int64
	for {
		rp := t.since(after)
		for i, e := range rp.entries {
			seq := rp.seq + int64(i)
			if sendProgress(ctx, call, token, seq, e) {
				sent++
			}
		}
		after = rp.seq + int64(len(rp.entries)) - 1
		if rp.finished {
			return sent
		}
		select {
		case <-rp.notify:
		case <-ctx.Done():
			t.cancel(errClientCancel)
			<-t.done
			return sent
		}
	}
}

// sendProgress sends entry e, number seq of the call's stream, as a progress
// notification, when the call has a progress token and is still on, and
// e is not a result line (the answer); it reports whether it was sent.
// The notification is best effort: a client that stopped reading loses
// progress, not the turn.
func sendProgress(ctx context.Context, call *mcp.CallToolRequest, token any, seq int64, e []byte) bool {
	if token == nil || ctx.Err() != nil || isResultLine(e) {
		return false
	}
	return call.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(seq), Message: string(e)}) == nil
}

// isResultLine: the log's last entry, the result, is the tool's answer,
// not a progress notification.
func isResultLine(e []byte) bool { return strings.HasPrefix(string(e), `{"type":"result"`) }

// answerText is a turn's answer as the text a model reads: the
// structured answer's JSON, else the final message; on failure the
// error; then the conversation id to continue from.
func answerText(line *engine.ResultLine) string {
	var b strings.Builder
	switch {
	case line.Error != nil:
		fmt.Fprintf(&b, "outpost: %s: %s", line.Error.Code, line.Error.Message)
	case len(line.Output) > 0:
		b.Write(line.Output)
	default:
		b.WriteString(line.Text)
	}
	if line.Conversation != "" {
		fmt.Fprintf(&b, "\n\n[outpost conversation %s, agent %s: resume or fork it to continue]", line.Conversation, line.Agent)
	}
	return b.String()
}

// withCaller is ctx with the call's peer (principalOfInfo): a call over
// HTTP is its authenticated peer's, one over stdio the operator's.
func withCaller(ctx context.Context, call *mcp.CallToolRequest) context.Context {
	var ti *auth.TokenInfo
	if call != nil && call.Extra != nil {
		ti = call.Extra.TokenInfo
	}
	return context.WithValue(ctx, principalKey{}, principalOfInfo(ctx, ti))
}

// toolError is a refused call: isError, the error as text, and as the
// structured content's "error", with outpost's code.
func toolError(err error) (*mcp.CallToolResult, any, error) {
	ej := outpost.ToJSON(fromError(err).err)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("outpost: %s: %s", ej.Code, ej.Message)}},
	}, map[string]any{"error": ej}, nil
}

func (s *Server) getConversationTool(ctx context.Context, call *mcp.CallToolRequest, args ConversationArgs) (*mcp.CallToolResult, any, error) {
	_, m, err := s.resolve(withCaller(ctx, call), args.ID)
	if err != nil {
		return toolError(err)
	}
	return nil, m, nil
}

func (s *Server) listConversationsTool(ctx context.Context, call *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	st, err := s.store()
	if err != nil {
		return toolError(err)
	}
	list, err := s.listFor(withCaller(ctx, call), st)
	if err != nil {
		return toolError(err)
	}
	return nil, map[string]any{"conversations": list}, nil
}

func (s *Server) listAgentsTool(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	return nil, map[string]any{"agents": s.agentList(), "sandboxes": s.sandboxList()}, nil
}
