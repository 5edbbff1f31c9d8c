package acp_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/acp"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness/echo"
	_ "github.com/outposthq/outpost/providers/local"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	os.Exit(m.Run())
}

// client is an ACP client that records the session updates it gets.
type client struct {
	mu      sync.Mutex
	updates []sdk.SessionNotification
	changed chan struct{}
}

func newClient() *client { return &client{changed: make(chan struct{}, 1)} }

func (c *client) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

func (c *client) RequestPermission(context.Context, sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}, nil
}
func (c *client) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, errors.New("no files")
}
func (c *client) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, errors.New("no files")
}
func (c *client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, errors.New("no terminals")
}
func (c *client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errors.New("no terminals")
}
func (c *client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errors.New("no terminals")
}
func (c *client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errors.New("no terminals")
}
func (c *client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errors.New("no terminals")
}

// take returns the updates so far and forgets them.
func (c *client) take() []sdk.SessionNotification {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.updates
	c.updates = nil
	return u
}

// waitFor waits until an update satisfies ok.
func (c *client) waitFor(t *testing.T, ok func(sdk.SessionUpdate) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		c.mu.Lock()
		for _, n := range c.updates {
			if ok(n.Update) {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatal("no such update within a minute")
		}
	}
}

// text is the agent's (or with user, the user's) text of the updates.
func text(ns []sdk.SessionNotification, user bool) string {
	var b strings.Builder
	for _, n := range ns {
		u := n.Update
		switch {
		case !user && u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
			b.WriteString(u.AgentMessageChunk.Content.Text.Text)
		case user && u.UserMessageChunk != nil && u.UserMessageChunk.Content.Text != nil:
			b.WriteString(u.UserMessageChunk.Content.Text.Text + "\n")
		}
	}
	return b.String()
}

// conn is one in-process `outpost acp`: an Agent served on pipes, and the
// Go SDK's client side of them.
type conn struct {
	*sdk.ClientSideConnection
	c    *client
	in   *io.PipeWriter // the agent's input
	done chan error
	once sync.Once
}

func serve(t *testing.T, store conversation.Store, d acp.Settings) *conn {
	t.Helper()
	a, err := acp.New(acp.Options{Store: store, Defaults: d, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ar, cw := io.Pipe()
	cr, aw := io.Pipe()
	c := newClient()
	k := &conn{ClientSideConnection: sdk.NewClientSideConnection(c, cw, cr), c: c, in: cw, done: make(chan error, 1)}
	go func() { k.done <- a.Serve(context.Background(), ar, aw); aw.Close() }()
	t.Cleanup(func() { k.close(t) })
	return k
}

// close ends the agent's input and waits for Serve to return.
func (k *conn) close(t *testing.T) {
	t.Helper()
	k.once.Do(func() {
		k.in.Close()
		select {
		case err := <-k.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Serve did not return within a minute of the end of its input")
		}
	})
}

func (k *conn) initialize(t *testing.T) sdk.InitializeResponse {
	t.Helper()
	r, err := k.Initialize(context.Background(), sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (k *conn) prompt(sid sdk.SessionId, text string) (sdk.PromptResponse, error) {
	return k.Prompt(context.Background(), sdk.PromptRequest{SessionId: sid, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
}

func rpcCode(t *testing.T, err error) (int, map[string]any) {
	t.Helper()
	var re *sdk.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is no JSON-RPC error", err, err)
	}
	data, _ := re.Data.(map[string]any)
	return re.Code, data
}

// TestSession runs a session through the Go SDK's client: initialize, new,
// a prompt whose updates carry the text, a tool call and the usage, a
// second prompt continuing the conversation, a cancelled slow prompt, and
// the session loaded by another Agent on the same store, its history
// replayed before it continues.
func TestSession(t *testing.T) {
	store := conversation.NewFS(t.TempDir())
	work := t.TempDir()
	k := serve(t, store, acp.Settings{})
	init := k.initialize(t)
	if !init.AgentCapabilities.LoadSession || init.AgentInfo == nil || init.AgentInfo.Name != "outpost" {
		t.Fatalf("initialize: %+v", init)
	}
	s, err := k.NewSession(context.Background(), sdk.NewSessionRequest{Cwd: work, McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := k.prompt(s.SessionId, "hello #tool")
	if err != nil || r.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("prompt: %+v, %v", r, err)
	}
	ups := k.c.take()
	if got := text(ups, false); !strings.Contains(got, "echo: hello #tool (turn 1)") {
		t.Errorf("agent text %q", got)
	}
	var call, result, usage bool
	for _, n := range ups {
		u := n.Update
		call = call || (u.ToolCall != nil && u.ToolCall.ToolCallId == "tool-1" && u.ToolCall.Kind == sdk.ToolKindExecute)
		result = result || (u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status == sdk.ToolCallStatusCompleted)
		usage = usage || (u.UsageUpdate != nil && u.UsageUpdate.Used > 0)
		if n.SessionId != s.SessionId {
			t.Errorf("update of session %s", n.SessionId)
		}
	}
	if !call || !result || !usage || r.Usage == nil || r.Usage.OutputTokens == 0 {
		t.Errorf("tool call %v, its result %v, usage update %v, response usage %+v", call, result, usage, r.Usage)
	}
	if _, err := k.prompt(s.SessionId, "again"); err != nil {
		t.Fatal(err)
	}
	if got := text(k.c.take(), false); !strings.Contains(got, "(turn 2)") {
		t.Errorf("second prompt's text %q: not the conversation's second turn", got)
	}
	cancelSlow(t, k, s.SessionId)

	// Another Agent (another `outpost acp`) loads the session.
	k.close(t)
	k2 := serve(t, store, acp.Settings{})
	k2.initialize(t)
	if _, err := k2.LoadSession(context.Background(), sdk.LoadSessionRequest{SessionId: s.SessionId, Cwd: work, McpServers: []sdk.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	replayed := k2.c.take()
	if got, want := text(replayed, true), "hello #tool\nagain\n#slow=1000\n"; got != want {
		t.Errorf("replayed user messages %q, want %q", got, want)
	}
	if got := text(replayed, false); !strings.Contains(got, "(turn 1)") || !strings.Contains(got, "(turn 2)") {
		t.Errorf("replayed answers %q", got)
	}
	if _, err := k2.prompt(s.SessionId, "after load"); err != nil {
		t.Fatal(err)
	}
	if got := text(k2.c.take(), false); !strings.Contains(got, "echo: after load (turn 4)") {
		t.Errorf("prompt after load: %q", got)
	}
}

// cancelSlow starts a long prompt, cancels it once its first chunk
// arrived, and expects stop reason cancelled.
func cancelSlow(t *testing.T, k *conn, sid sdk.SessionId) {
	t.Helper()
	type answer struct {
		r   sdk.PromptResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := k.prompt(sid, "#slow=1000")
		ch <- answer{r, err}
	}()
	k.c.waitFor(t, func(u sdk.SessionUpdate) bool {
		return u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil && strings.HasPrefix(u.AgentMessageChunk.Content.Text.Text, "step ")
	})
	if err := k.Cancel(context.Background(), sdk.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil || a.r.StopReason != sdk.StopReasonCancelled {
		t.Fatalf("cancelled prompt: %+v, %v", a.r, a.err)
	}
	k.c.take()
}
