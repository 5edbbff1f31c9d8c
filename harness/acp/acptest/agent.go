// Package acptest is a scripted ACP agent (the Go SDK's agent side) for
// tests: a test binary that calls MaybeRun in its TestMain becomes the
// agent when started with AgentVariable=1, and Preset is it as an ACP
// preset (harness/acp's engine tests, package acp's `outpost acp` tests).
package acptest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// AgentVariable makes the test binary a scripted ACP agent (the SDK's
// agent side) instead of running the tests: the tests start it in the
// local sandbox as the preset's program.
const AgentVariable = "OUTPOST_ACP_TEST_AGENT"

// Preset is the scripted agent as an ACP preset running program (the
// test binary, or a name the turn's Command replaces): its sessions are
// the files of ~/.acpt, captured and restored like any preset's; with
// resume it offers session/resume, else session/load.
func Preset(program string, resume bool) *harness.Harness {
	base := &harness.Harness{
		Name:      "acpt",
		Request:   func(harness.Input) (harness.Command, error) { return harness.Command{Path: program}, nil },
		Events:    func([]byte) []harness.Event { return nil },
		Storage:   &harness.Storage{Roots: []string{".acpt"}, Match: func(rel, native string) bool { return rel == native+".txt" }},
		Variables: map[string]string{AgentVariable: "1"},
	}
	if resume {
		base.Variables["OUTPOST_ACP_TEST_RESUME"] = "1"
	}
	return acp.Preset(base, acp.Config{Name: "acpt-acp", Program: program})
}

// MaybeRun runs the scripted agent over standard input and output when
// the test binary was started as one, and exits when its input ends.
func MaybeRun() {
	if os.Getenv(AgentVariable) != "1" {
		return
	}
	a := &scripted{dir: filepath.Join(os.Getenv("HOME"), ".acpt"), resume: os.Getenv("OUTPOST_ACP_TEST_RESUME") == "1"}
	// The connection reads nothing before it is assigned: the SDK starts
	// its reader inside NewAgentSideConnection and sets its own conn field
	// after, so a message read at once would race with both.
	ready := make(chan struct{})
	a.conn = sdk.NewAgentSideConnection(a, os.Stdout, gated{ready, os.Stdin})
	close(ready)
	<-a.conn.Done()
	if os.Getenv("OUTPOST_ACP_TEST_LINGER") == "1" {
		select {} // keeps running on a closed input, as the ACP adapters do
	}
	os.Exit(0)
}

// gated reads r once ready is closed.
type gated struct {
	ready chan struct{}
	r     io.Reader
}

func (g gated) Read(p []byte) (int, error) { <-g.ready; return g.r.Read(p) }

// scripted is an ACP agent whose prompts choose what it does by a marker:
// SLOW (works until cancelled), TOOL (a shell call that asks permission),
// QUOTA (a 429 error), EXIT (dies mid-prompt), HUGE (a 4 MiB chunk),
// BADLINE (a line that is not JSON-RPC), PLAN (a plan and a thought);
// otherwise it answers "echo: PROMPT (turn N)". Sessions are files of
// prompts in ~/.acpt, which session/load replays.
type scripted struct {
	conn   *sdk.AgentSideConnection
	dir    string
	resume bool
	mu     sync.Mutex
}

func (a *scripted) Initialize(context.Context, sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	r := sdk.InitializeResponse{ProtocolVersion: sdk.ProtocolVersionNumber, AgentCapabilities: sdk.AgentCapabilities{LoadSession: true}}
	if a.resume {
		r.AgentCapabilities.SessionCapabilities.Resume = &sdk.SessionResumeCapabilities{}
	}
	return r, nil
}

func (a *scripted) Authenticate(context.Context, sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	return sdk.AuthenticateResponse{}, nil
}
func (a *scripted) Cancel(context.Context, sdk.CancelNotification) error { return nil }
func (a *scripted) CloseSession(context.Context, sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	return sdk.CloseSessionResponse{}, nil
}
func (a *scripted) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, nil
}
func (a *scripted) SetSessionConfigOption(context.Context, sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, nil
}
func (a *scripted) SetSessionMode(context.Context, sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	return sdk.SetSessionModeResponse{}, nil
}

func (a *scripted) path(id sdk.SessionId) string { return filepath.Join(a.dir, string(id)+".txt") }

func (a *scripted) NewSession(context.Context, sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	id := sdk.SessionId(fmt.Sprintf("s%d", os.Getpid()))
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	return sdk.NewSessionResponse{SessionId: id}, os.WriteFile(a.path(id), nil, 0o600)
}

func (a *scripted) history(id sdk.SessionId) ([]string, error) {
	b, err := os.ReadFile(a.path(id))
	if err != nil {
		return nil, &sdk.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"details": err.Error()}}
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), nil
}

// LoadSession replays the history (the user's prompts and the answers)
// before it answers, as the protocol says.
func (a *scripted) LoadSession(ctx context.Context, p sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	h, err := a.history(p.SessionId)
	if err != nil {
		return sdk.LoadSessionResponse{}, err
	}
	for _, line := range h {
		a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: p.SessionId, Update: sdk.UpdateUserMessageText(line)})
		a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: p.SessionId, Update: sdk.UpdateAgentMessageText("HISTORY " + line)})
	}
	return sdk.LoadSessionResponse{}, nil
}

func (a *scripted) ResumeSession(_ context.Context, p sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	_, err := a.history(p.SessionId)
	return sdk.ResumeSessionResponse{}, err
}

func (a *scripted) say(ctx context.Context, id sdk.SessionId, u sdk.SessionUpdate) {
	a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: id, Update: u})
}

func (a *scripted) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, err := a.history(p.SessionId)
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	text := ""
	for _, b := range p.Prompt {
		if b.Text != nil {
			text += b.Text.Text
		}
	}
	id := p.SessionId
	switch {
	case strings.Contains(text, "QUOTA"):
		return sdk.PromptResponse{}, &sdk.RequestError{Code: 429, Message: "Resource has been exhausted (e.g. check quota)."}
	case strings.Contains(text, "EXIT"):
		a.say(ctx, id, sdk.UpdateAgentMessageText("about to die"))
		os.Exit(3)
	case strings.Contains(text, "SLOW"):
		a.say(ctx, id, sdk.UpdateAgentMessageText("working"))
		<-ctx.Done()
		return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
	case strings.Contains(text, "TOOL"):
		return a.tool(ctx, id)
	case strings.Contains(text, "HUGE"):
		a.say(ctx, id, sdk.UpdateAgentMessageText(strings.Repeat("x", 1<<20)))
	case strings.Contains(text, "BADLINE"):
		os.Stdout.WriteString("this is not JSON-RPC\n{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n")
	case strings.Contains(text, "PLAN"):
		a.say(ctx, id, sdk.UpdatePlan(sdk.PlanEntry{Content: "look", Status: sdk.PlanEntryStatusInProgress, Priority: sdk.PlanEntryPriorityHigh}))
		a.say(ctx, id, sdk.UpdateAgentThoughtText("thinking"))
	}
	h = append(h, text)
	if err := os.WriteFile(a.path(id), []byte(strings.TrimSpace(strings.Join(h, "\n"))+"\n"), 0o600); err != nil {
		return sdk.PromptResponse{}, err
	}
	a.say(ctx, id, sdk.UpdateAgentMessageText("echo: "+text))
	a.say(ctx, id, sdk.UpdateAgentMessageText(fmt.Sprintf(" (turn %d)", len(nonEmpty(h)))))
	cached := 2
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: &sdk.Usage{InputTokens: 10, OutputTokens: 5, CachedReadTokens: &cached, TotalTokens: 15}}, nil
}

func nonEmpty(h []string) []string {
	var out []string
	for _, s := range h {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// tool runs a shell call that asks permission first.
func (a *scripted) tool(ctx context.Context, id sdk.SessionId) (sdk.PromptResponse, error) {
	a.say(ctx, id, sdk.StartToolCall("call-1", "echo tool-ran", sdk.WithStartKind(sdk.ToolKindExecute), sdk.WithStartStatus(sdk.ToolCallStatusPending), sdk.WithStartRawInput(map[string]any{"command": "echo tool-ran"})))
	r, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: id, ToolCall: sdk.ToolCallUpdate{ToolCallId: "call-1"}, Options: []sdk.PermissionOption{
		{OptionId: "yes", Name: "Allow", Kind: sdk.PermissionOptionKindAllowOnce},
		{OptionId: "no", Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
	}})
	allowed := err == nil && r.Outcome.Selected != nil && r.Outcome.Selected.OptionId == "yes"
	if allowed {
		a.say(ctx, id, sdk.UpdateToolCall("call-1", sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted), sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("tool-ran"))})))
		a.say(ctx, id, sdk.UpdateAgentMessageText("the tool said tool-ran"))
	} else {
		a.say(ctx, id, sdk.UpdateToolCall("call-1", sdk.WithUpdateStatus(sdk.ToolCallStatusFailed), sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("permission refused"))})))
		a.say(ctx, id, sdk.UpdateAgentMessageText("the tool was refused"))
	}
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
}
