package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
)

// runTurnTool is the name Claude Code gives outpost's run_turn tool when
// the MCP server is configured as "outpost".
const runTurnTool = "mcp__outpost__run_turn"

// TestMCPClaudeCode: the real Claude Code CLI, configured with `outpost
// mcp` as its MCP server (--mcp-config), is driven by the fake API to call
// run_turn on the echo agent, and gets the echo agent's answer back as the
// tool's result, which it passes to the model.
func TestMCPClaudeCode(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "claude")
	fake := anthropic.New(t, anthropic.Options{
		Choose: func(r *anthropic.Request) (anthropic.Scenario, bool) {
			if slices.Contains(r.Tools, runTurnTool) && !r.HasToolResult {
				return anthropic.ToolUse(runTurnTool, map[string]any{"agent": "echo", "prompt": "hello from claude"}), true
			}
			return anthropic.Scenario{}, false
		},
	})
	work, home := t.TempDir(), t.TempDir()
	// The server's log (its standard error) goes to a file, to read what
	// run_turn did.
	logFile := filepath.Join(t.TempDir(), "mcp.log")
	config, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"outpost": map[string]any{
		"command": "/bin/sh",
		"args":    []string{"-c", `exec "$0" mcp --workdir "$1" --log-format text 2>>"$2"`, outpostBinary(t), work, logFile},
		"env":     map[string]string{"OUTPOST_HOME": filepath.Join(home, ".outpost-home")},
	}}})
	cmd := exec.Command(bin, "-p", "--output-format", "stream-json", "--verbose",
		"--mcp-config", string(config), "--strict-mcp-config", "--allowedTools", runTurnTool,
		"--", "delegate a greeting to the echo agent")
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"ANTHROPIC_BASE_URL=" + fake.URL(),
		"ANTHROPIC_API_KEY=sk-ant-fake-" + randomHex(t, 16),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_MAX_RETRIES=0",
		"MCP_TIMEOUT=60000",
		"ENABLE_TOOL_SEARCH=false", // MCP tools offered to the model at once, not through ToolSearch
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("claude: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var toolResult, final string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var line struct {
			Type    string `json:"type"`
			Result  string `json:"result"`
			Message struct {
				Content []struct {
					Type    string          `json:"type"`
					Content json.RawMessage `json:"content"`
					IsError bool            `json:"is_error"`
				} `json:"content"`
			} `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		for _, c := range line.Message.Content {
			if c.Type == "tool_result" {
				toolResult += string(c.Content)
				if c.IsError {
					t.Errorf("the tool result is an error: %s", c.Content)
				}
			}
		}
		if line.Type == "result" {
			final = line.Result
		}
	}
	// Claude Code gives the model the structured content: the result line.
	var text string
	var result map[string]any
	if json.Unmarshal([]byte(toolResult), &text) != nil || json.Unmarshal([]byte(text), &result) != nil {
		t.Fatalf("run_turn's result as Claude Code saw it: %s\nstdout:\n%s", toolResult, out)
	}
	if conv, _ := result["conversation"].(string); result["text"] != "echo: hello from claude (turn 1)" || !strings.HasPrefix(conv, "c") || result["error"] != nil {
		t.Errorf("run_turn's result as Claude Code saw it: %v", result)
	}
	// The fake model echoes the tool result it was given: the answer came back.
	if !strings.Contains(final, "last_user=[tool_result] ") || !strings.Contains(final, "echo: hello from claude (turn 1)") {
		t.Errorf("final answer %q", final)
	}
	logs, _ := os.ReadFile(logFile)
	m := regexp.MustCompile(`msg="outpost mcp: run_turn" turn=\S+ progress_token=(\w+) notified=(\d+) cancelled=false`).FindSubmatch(logs)
	switch {
	case m == nil:
		t.Errorf("outpost mcp logged no run_turn:\n%s", logs)
	case string(m[1]) != "true" || string(m[2]) == "0":
		// The pinned CLI sends a progress token: the turn's events
		// (session, message, finished) stream to it.
		t.Errorf("progress token %s, %s notifications sent, want a token and the events:\n%s", m[1], m[2], logs)
	}
	var called bool
	for _, r := range fake.MessageRequests() {
		called = called || slices.Contains(r.Tools, runTurnTool)
	}
	if !called {
		for _, r := range fake.MessageRequests() {
			t.Logf("request %d tools %v", r.Seq, r.Tools)
		}
		t.Errorf("no request offered the model %s", runTurnTool)
	}
}
