package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
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
// caller's schema, checked by the engine).
func object(props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props}
}

var errorSchema = map[string]any{"type": []string{"object", "null"}, "description": "outpost's error: code (docs/errors.md), message, details"}

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
		OutputSchema: object(map[string]any{
			"conversation": map[string]any{"type": "string"},
			"agent":        map[string]any{"type": "string"},
			"text":         map[string]any{"type": "string", "description": "the agent's final message"},
			"output":       map[string]any{"description": "the validated structured answer, with schema"},
			"usage":        map[string]any{"type": "object"},
			"error":        errorSchema,
		}),
	}, s.runTurnTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:        "race",
		Title:       "Race agents on one task",
		Description: "Run one task as several turns at once (each agent count times), each in its own sandbox and copy of the workspace, run the check in each, and pick the winner: the passing contestant with the fewest tokens, or the judge's pick. Every contestant stays a conversation (resume, fork or diff it). Progress and the contestants' events stream as progress notifications; cancelling the call cancels the race.",
		OutputSchema: object(map[string]any{
			"results": map[string]any{"type": "array", "description": "each contestant's result line, with its contestant index"},
			"race":    map[string]any{"type": "object", "description": "winner (-1: none passed), conversation (the winner's), contestants, judge, tokens"},
			"error":   errorSchema,
		}),
	}, s.raceTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:        "diff",
		Title:       "Show what a turn changed",
		Description: "The unified diff of what a turn changed in its workspace (its checkpoint against the workspace it started from), or of one turn's workspace against another's (to). format stat gives a line a file, json the files only.",
		OutputSchema: object(map[string]any{
			"from":    map[string]any{"type": "string"},
			"to":      map[string]any{"type": "string"},
			"files":   map[string]any{"type": "array", "description": "path, action (added, modified, deleted), added and deleted lines"},
			"added":   map[string]any{"type": "integer"},
			"deleted": map[string]any{"type": "integer"},
			"error":   errorSchema,
		}),
	}, s.diffTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "get_conversation",
		Title:        "Show a stored conversation",
		Description:  "The metadata of a stored conversation: agent, model, sandbox, turns, token usage.",
		OutputSchema: object(map[string]any{"id": map[string]any{"type": "string"}, "agent": map[string]any{"type": "string"}, "turns": map[string]any{"type": "integer"}, "error": errorSchema}),
	}, s.getConversationTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "list_conversations",
		Title:        "List stored conversations",
		Description:  "The stored conversations, each with its id, agent, turns and usage.",
		OutputSchema: object(map[string]any{"conversations": map[string]any{"type": "array"}, "error": errorSchema}),
	}, s.listConversationsTool)
	mcp.AddTool(m, &mcp.Tool{
		Name:         "list_agents",
		Title:        "List agent presets",
		Description:  "The agent presets run_turn accepts, as GET /v1/agents lists them: name, pinned CLI version, source, whether the CLI is installed (no download), keyless, and whether they resume, fork and take live input.",
		OutputSchema: object(map[string]any{"agents": map[string]any{"type": "array"}}),
	}, s.listAgentsTool)
	return m
}

// mcpHandler serves the MCP server over streamable HTTP.
func (s *Server) mcpHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		MaxRequestBodyBytes: s.o.MaxBody,
	})
}

// request is the turn request of the arguments.
func (a RunTurnArgs) request() (*TurnRequest, error) {
	req := &TurnRequest{Agent: a.Agent, Model: a.Model, Prompt: a.Prompt, Sandbox: a.Sandbox, Resume: a.Resume, Fork: a.Fork,
		Workspace: a.Workspace, Checkpoint: a.Checkpoint, Check: a.Check}
	if a.Image != "" {
		req.Settings = map[string]string{"image": a.Image}
	}
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
		Model: a.Model, Sandbox: a.Sandbox, MaxTokens: a.MaxTokens, Budget: a.Budget, Options: a.Options, AgentOptions: a.AgentOptions}
	if a.Image != "" {
		req.Settings = map[string]string{"image": a.Image}
	}
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
	rc, err := s.startRace(ctx, req, token != nil)
	if err != nil {
		return toolError(err)
	}
	sent, seq := 0, 0
	gone := ctx.Done()
	for {
		items, finished, notify := rc.take()
		for _, it := range items {
			seq++
			if token != nil && ctx.Err() == nil && !isResultLine(it) && !strings.HasPrefix(string(it), `{"type":"race"`) {
				if call.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(seq), Message: string(it)}) == nil {
					sent++
				}
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
func (s *Server) diffTool(ctx context.Context, _ *mcp.CallToolRequest, args DiffArgs) (*mcp.CallToolResult, any, error) {
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
	t, err := s.admit(ctx, req)
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
	return res, line, nil
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
			if token != nil && ctx.Err() == nil && !isResultLine(e) {
				// The notification is best effort: a client that stopped
				// reading loses progress, not the turn.
				if call.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(seq), Message: string(e)}) == nil {
					sent++
				}
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

// toolError is a refused call: isError, the error as text, and as the
// structured content's "error", with outpost's code.
func toolError(err error) (*mcp.CallToolResult, any, error) {
	ej := outpost.ToJSON(fromError(err).err)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("outpost: %s: %s", ej.Code, ej.Message)}},
	}, map[string]any{"error": ej}, nil
}

func (s *Server) getConversationTool(ctx context.Context, _ *mcp.CallToolRequest, args ConversationArgs) (*mcp.CallToolResult, any, error) {
	_, m, err := s.resolve(ctx, args.ID)
	if err != nil {
		return toolError(err)
	}
	return nil, m, nil
}

func (s *Server) listConversationsTool(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	st, err := s.store()
	if err != nil {
		return toolError(err)
	}
	list, err := st.List(ctx)
	if err != nil {
		return toolError(outpost.Wrap(outpost.Conversation, "list", err))
	}
	if list == nil {
		list = []conversation.Meta{}
	}
	return nil, map[string]any{"conversations": list}, nil
}

func (s *Server) listAgentsTool(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	return nil, map[string]any{"agents": s.agentList()}, nil
}
