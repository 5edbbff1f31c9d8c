package acp_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/acp"
	"github.com/outposthq/outpost/acp/acptest"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	hacptest "github.com/outposthq/outpost/harness/acp/acptest"
)

// TestPermission: an agent that speaks ACP in the sandbox (the scripted
// agent of harness/acp/acptest as the session's agent) asks permission
// for a shell call; the request reaches the editor (the Go SDK's client)
// as session/request_permission after the updates before it, and its
// answer goes back: allowed, the tool runs; refused, the tool call ends
// failed ("permission denied") and the agent goes on; a session/cancel
// while the editor has not answered withdraws the request and the
// prompt answers cancelled.
func TestPermission(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agents := func(name string) (*harness.Harness, error) {
		if name != "acpt-acp" {
			return nil, errors.New("unknown agent " + name)
		}
		return hacptest.Preset(self, false), nil
	}
	answers := make(chan string, 1)
	asked := make(chan struct{}, 1)
	c := acptest.New()
	c.Answer = func(ctx context.Context, r sdk.RequestPermissionRequest) string {
		asked <- struct{}{}
		select {
		case a := <-answers:
			return a
		case <-ctx.Done():
			return ""
		}
	}
	k := serveOptions(t, acp.Options{Store: conversation.NewFS(t.TempDir()), Agents: agents, Defaults: acp.Settings{Agent: "acpt-acp"}}, c)
	k.initialize(t)
	s, err := k.NewSession(context.Background(), sdk.NewSessionRequest{Cwd: t.TempDir(), McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ answer, text string }{{"yes", "the tool said tool-ran"}, {"no", "the tool was refused"}} {
		answers <- tc.answer
		r, err := k.prompt(s.SessionId, "run TOOL")
		<-asked
		if err != nil || r.StopReason != sdk.StopReasonEndTurn {
			t.Fatalf("%s: %+v %v", tc.answer, r, err)
		}
		ups, reqs := k.c.Take(), k.c.Asked()
		if got := acptest.Text(ups, false); !strings.Contains(got, tc.text) {
			t.Errorf("%s: text %q", tc.answer, got)
		}
		if len(reqs) != 1 || reqs[0].ToolCall.ToolCallId != "call-1" || reqs[0].ToolCall.Kind == nil || *reqs[0].ToolCall.Kind != sdk.ToolKindExecute ||
			len(reqs[0].Options) != 2 || reqs[0].Options[0].OptionId != "yes" || reqs[0].SessionId != s.SessionId {
			t.Errorf("%s: permission requests %+v", tc.answer, reqs)
		}
		var failed bool
		for _, n := range ups {
			u := n.Update.ToolCallUpdate
			failed = failed || u != nil && u.ToolCallId == "call-1" && u.Status != nil && *u.Status == sdk.ToolCallStatusFailed
		}
		if failed != (tc.answer == "no") {
			t.Errorf("%s: the tool call failed: %v; updates %+v", tc.answer, failed, ups)
		}
	}

	// Cancelled while the editor has not answered.
	done := make(chan error, 1)
	var r sdk.PromptResponse
	go func() {
		var err error
		r, err = k.prompt(s.SessionId, "run TOOL")
		done <- err
	}()
	<-asked
	if err := k.Cancel(context.Background(), sdk.CancelNotification{SessionId: s.SessionId}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || r.StopReason != sdk.StopReasonCancelled {
		t.Errorf("cancelled while asking: %+v %v", r, err)
	}
}
