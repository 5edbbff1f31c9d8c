package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outposthq/outpost/server"
)

// TestPreflight: a turn, a race or an MCP run_turn whose agent has no
// credential in the server's environment is refused at once with 400 and
// code configuration, naming the variable to set, before it is queued:
// no turn runs. The same agent with its key in a request's env passes
// the check.
func TestPreflight(t *testing.T) {
	ts := start(t, nil) // its environment holds no ANTHROPIC_API_KEY, and no HOME
	for _, tc := range []struct {
		name, path string
		body       map[string]any
	}{
		{"turn", "/v1/turns", map[string]any{"prompt": "x", "agent": "claude"}},
		{"race", "/v1/races", map[string]any{"prompt": "x", "agents": []string{"echo", "claude"}}},
		{"judge", "/v1/races", map[string]any{"prompt": "x", "agents": []string{"echo"}, "judge": "copilot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b, _ := ts.do("POST", tc.path, tc.body)
			var e server.ErrorResponse
			if code != 400 || json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Code != "configuration" {
				t.Fatalf("%d %s, want 400 configuration", code, b)
			}
			if !strings.Contains(e.Error.Message, "ANTHROPIC_API_KEY") && !strings.Contains(e.Error.Message, "COPILOT_GITHUB_TOKEN") {
				t.Errorf("message %q names no variable", e.Error.Message)
			}
		})
	}
	code, b, _ := ts.do("GET", "/metrics", nil)
	if code != 200 || strings.Contains(string(b), "outpost_turns_total{") {
		t.Errorf("a refused request ran a turn:\n%s", grep(string(b), "outpost_turns_total"))
	}

	cs := ts.mcpSession(t, &progress{})
	res, sc := call(t, cs, "run_turn", map[string]any{"prompt": "x", "agent": "claude"})
	if !res.IsError || errCode(sc) != "configuration" || !strings.Contains(text(res), "ANTHROPIC_API_KEY") {
		t.Errorf("MCP run_turn: isError %v, text %q, structured %v; want configuration naming ANTHROPIC_API_KEY", res.IsError, text(res), sc)
	}

	// The key in the request's own variables is a credential: the turn
	// is admitted (and fails later, the claude CLI being absent or the
	// key fake, which is not this test's concern).
	code, b, _ = ts.do("POST", "/v1/turns", map[string]any{"prompt": "x", "agent": "claude", "env": map[string]string{"ANTHROPIC_API_KEY": "sk-ant-fake"}, "timeout_ms": 1})
	if code != 202 {
		t.Errorf("with the key in env: %d %s, want 202", code, b)
	}
}
