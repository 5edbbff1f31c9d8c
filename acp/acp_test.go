package acp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/acp"
	"github.com/outposthq/outpost/acp/acptest"
	"github.com/outposthq/outpost/conversation"
	hacptest "github.com/outposthq/outpost/harness/acp/acptest"
	"github.com/outposthq/outpost/harness/echo"
	_ "github.com/outposthq/outpost/providers/local"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	hacptest.MaybeRun()
	os.Exit(m.Run())
}

// conn is one in-process `outpost acp`: an Agent served on pipes, and the
// Go SDK's client side of them.
type conn struct {
	*sdk.ClientSideConnection
	c    *acptest.Client
	in   *io.PipeWriter // the agent's input
	done chan error
	once sync.Once
}

func serve(t *testing.T, store conversation.Store, d acp.Settings) *conn {
	t.Helper()
	return serveOptions(t, acp.Options{Store: store, Defaults: d}, acptest.New())
}

// serveOptions is serve with every option, and the client c.
func serveOptions(t *testing.T, o acp.Options, c *acptest.Client) *conn {
	t.Helper()
	o.Version = "test"
	a, err := acp.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ar, cw := io.Pipe()
	cr, aw := io.Pipe()
	k := &conn{ClientSideConnection: sdk.NewClientSideConnection(c, cw, cr), c: c, in: cw, done: make(chan error, 1)}
	k.SetLogger(slog.New(slog.DiscardHandler))
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
	ups := k.c.Take()
	if got := acptest.Text(ups, false); !strings.Contains(got, "echo: hello #tool (turn 1)") {
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
	if got := acptest.Text(k.c.Take(), false); !strings.Contains(got, "(turn 2)") {
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
	replayed := k2.c.Take()
	if got, want := acptest.Text(replayed, true), "hello #tool\nagain\n#slow=1000\n"; got != want {
		t.Errorf("replayed user messages %q, want %q", got, want)
	}
	if got := acptest.Text(replayed, false); !strings.Contains(got, "(turn 1)") || !strings.Contains(got, "(turn 2)") {
		t.Errorf("replayed answers %q", got)
	}
	if _, err := k2.prompt(s.SessionId, "after load"); err != nil {
		t.Fatal(err)
	}
	if got := acptest.Text(k2.c.Take(), false); !strings.Contains(got, "echo: after load (turn 4)") {
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
	k.c.WaitFor(t, func(u sdk.SessionUpdate) bool {
		return u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil && strings.HasPrefix(u.AgentMessageChunk.Content.Text.Text, "step ")
	})
	if err := k.Cancel(context.Background(), sdk.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil || a.r.StopReason != sdk.StopReasonCancelled {
		t.Fatalf("cancelled prompt: %+v, %v", a.r, a.err)
	}
	k.c.Take()
}

// TestSessionKeepsItsSandbox: a session's prompts run on one sandbox,
// which a failed turn, the session's close, the idle limit and the end
// of the connection release; with SandboxIdle negative every prompt has
// its own. The local provider's leases are the directories of its root.
func TestSessionKeepsItsSandbox(t *testing.T) {
	store := conversation.NewFS(t.TempDir())
	leases := func(root string) []string {
		t.Helper()
		es, err := os.ReadDir(root)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		return names
	}
	open := func(t *testing.T, idle time.Duration) (*conn, sdk.SessionId, string) {
		root := t.TempDir()
		k := serveOptions(t, acp.Options{Store: store, SandboxIdle: idle, Defaults: acp.Settings{Settings: map[string]string{"root": root}}}, acptest.New())
		k.initialize(t)
		s, err := k.NewSession(context.Background(), sdk.NewSessionRequest{Cwd: t.TempDir(), McpServers: []sdk.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		return k, s.SessionId, root
	}
	// prompt runs a prompt and returns its response's sandbox_kept.
	prompt := func(t *testing.T, k *conn, sid sdk.SessionId, text string) bool {
		t.Helper()
		r, err := k.prompt(sid, text)
		if err != nil {
			t.Fatalf("prompt %q: %v", text, err)
		}
		k.c.Take()
		kept, ok := r.Meta[acp.MetaKey].(map[string]any)["sandbox_kept"].(bool)
		if !ok {
			t.Fatalf("prompt %q: no sandbox_kept in _meta: %+v", text, r.Meta)
		}
		return kept
	}
	gone := func(t *testing.T, root, what string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); len(leases(root)) > 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: sandboxes %v still there", what, leases(root))
			}
		}
	}

	t.Run("kept", func(t *testing.T) {
		k, sid, root := open(t, time.Hour)
		if prompt(t, k, sid, "one") {
			t.Error("the first prompt says it ran on a kept sandbox")
		}
		first := leases(root)
		if len(first) != 1 {
			t.Fatalf("after a prompt, sandboxes %v: want the session's one", first)
		}
		if !prompt(t, k, sid, "two") {
			t.Error("the second prompt says it ran on a new sandbox")
		}
		if got := leases(root); !slices.Equal(got, first) {
			t.Fatalf("second prompt's sandboxes %v, want %v kept", got, first)
		}
		// A failed turn leaves none kept; the next prompt gets a new one.
		if _, err := k.prompt(sid, "#crash"); err == nil {
			t.Fatal("#crash: no error")
		}
		k.c.Take()
		gone(t, root, "after a failed turn")
		if prompt(t, k, sid, "three") {
			t.Error("the prompt after a failure says it ran on a kept sandbox")
		}
		if got := leases(root); len(got) != 1 || slices.Equal(got, first) {
			t.Fatalf("after the failure, sandboxes %v: want a new one", got)
		}
		if _, err := k.CloseSession(context.Background(), sdk.CloseSessionRequest{SessionId: sid}); err != nil {
			t.Fatal(err)
		}
		gone(t, root, "after session/close")
	})
	t.Run("end of input", func(t *testing.T) {
		k, sid, root := open(t, time.Hour)
		prompt(t, k, sid, "one")
		k.close(t)
		if got := leases(root); len(got) > 0 {
			t.Fatalf("Serve returned with sandboxes %v kept", got)
		}
	})
	t.Run("idle", func(t *testing.T) {
		k, sid, root := open(t, 50*time.Millisecond)
		prompt(t, k, sid, "one")
		gone(t, root, "after the idle limit")
		prompt(t, k, sid, "two") // on a new sandbox
	})
	t.Run("none", func(t *testing.T) {
		k, sid, root := open(t, -1)
		prompt(t, k, sid, "one")
		if got := leases(root); len(got) > 0 {
			t.Fatalf("SandboxIdle -1 kept %v", got)
		}
	})
}
