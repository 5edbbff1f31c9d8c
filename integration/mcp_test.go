package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
)

// These tests run `outpost mcp` (the built binary) as an MCP server over
// stdio, as a coding agent starts it: with the Go SDK's client, and with
// the real Claude Code CLI (claude_mcp_test.go). The TypeScript SDK's
// client is in clients/typescript/test/mcp.test.ts (TestServeTypeScriptClient).

// mcpCommand is `outpost mcp` with a home, a working directory and args.
func mcpCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	work := t.TempDir()
	cmd := exec.Command(outpostBinary(t), append([]string{"mcp", "--workdir", work, "--log-format", "text"}, args...)...)
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+t.TempDir())
	return cmd
}

// mcpEvents collects the events that progress notifications carry.
type mcpEvents struct {
	mu     sync.Mutex
	types  []string
	onMsg  func()
	called bool
}

func (e *mcpEvents) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	var ev struct{ Type string }
	json.Unmarshal([]byte(req.Params.Message), &ev)
	e.mu.Lock()
	e.types = append(e.types, ev.Type)
	f := e.onMsg
	run := ev.Type == "message" && f != nil && !e.called
	if run {
		e.called = true
	}
	e.mu.Unlock()
	if run {
		f()
	}
}

func (e *mcpEvents) got() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.types...)
}

// connectMCP starts cmd and connects the Go SDK's client to it over its
// standard input and output; the session is closed (the server exits
// once its turns have ended) when the test ends.
func connectMCP(t *testing.T, cmd *exec.Cmd, ev *mcpEvents) *mcp.ClientSession {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "outpost-integration", Version: "v0"}, &mcp.ClientOptions{ProgressNotificationHandler: ev.handle})
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Minute}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("outpost mcp's standard error:\n%s", stderr.String())
		}
	})
	return cs
}

func runTurn(ctx context.Context, cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, map[string]any, error) {
	p := &mcp.CallToolParams{Name: "run_turn", Arguments: args}
	p.SetProgressToken("turn")
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	var sc map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &sc)
	return res, sc, nil
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPStdioGoClient: the Go SDK's client runs turns through `outpost
// mcp` over stdio: progress carries the events, the answer comes back,
// resume continues the conversation, get_conversation reads it.
func TestMCPStdioGoClient(t *testing.T) {
	t.Parallel()
	ev := &mcpEvents{}
	cs := connectMCP(t, mcpCommand(t), ev)
	ctx := context.Background()
	res, sc, err := runTurn(ctx, cs, map[string]any{"prompt": "hello over stdio", "agent": "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(resultText(res), "echo: hello over stdio (turn 1)") {
		t.Fatalf("run_turn: error %v, text %q", res.IsError, resultText(res))
	}
	if got := ev.got(); len(got) < 3 || got[0] != "session" || got[len(got)-1] != "finished" {
		t.Errorf("progress events %v, want session ... finished", got)
	}
	conv, _ := sc["conversation"].(string)
	res, _, err = runTurn(ctx, cs, map[string]any{"prompt": "again", "resume": conv})
	if err != nil || res.IsError || !strings.Contains(resultText(res), "(turn 2)") {
		t.Fatalf("resume: %v %q", err, resultText(res))
	}
	p := &mcp.CallToolParams{Name: "get_conversation", Arguments: map[string]any{"id": conv}}
	got, err := cs.CallTool(ctx, p)
	if err != nil || got.IsError || !strings.Contains(resultText(got), `"turns":2`) {
		t.Errorf("get_conversation: %v %q", err, resultText(got))
	}
}

// TestMCPCancelDocker: cancelling a run_turn call on the docker sandbox
// cancels the turn and removes its container while `outpost mcp` keeps
// running.
func TestMCPCancelDocker(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	cmd := mcpCommand(t, "--sandbox", "docker", "--image", dockertest.Busybox)
	dc := dockertest.Client(t)
	owned := func() []container.Summary {
		f := filters.NewArgs(filters.Arg("label", docker.LabelOwnerPID+"="+strconv.Itoa(cmd.Process.Pid)))
		list, err := dc.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := -1
	ev := &mcpEvents{onMsg: func() { running = len(owned()); cancel() }}
	cs := connectMCP(t, cmd, ev)
	_, _, err := runTurn(ctx, cs, map[string]any{"prompt": "#slow=100000"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run_turn: %v, want cancelled", err)
	}
	if running < 1 {
		t.Fatalf("%d containers while the turn ran: the test does not test the removal", running)
	}
	deadline := time.Now().Add(time.Minute)
	for len(owned()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled turn's container remains: %v", owned())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The server still serves.
	res, _, err := runTurn(context.Background(), cs, map[string]any{"prompt": "after the cancel"})
	if err != nil || res.IsError {
		t.Fatalf("a turn after the cancel: %v %v", err, res)
	}
	if len(owned()) != 0 {
		t.Errorf("a finished turn's container remains")
	}
}
