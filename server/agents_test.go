package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/server"
)

// TestAgentsList: GET /v1/agents and MCP's list_agents give the one list
// server.Agents makes (the one `outpost agents` prints): every preset with
// its pinned version, its source, whether it is installed; the response
// is validated against the OpenAPI document like every exchange.
func TestAgentsList(t *testing.T) {
	ts := start(t, nil)
	code, b, _ := ts.do("GET", "/v1/agents", nil)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var got struct {
		Agents    []server.Agent
		Sandboxes []server.Sandbox
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	// Beside the agents, the served sandboxes with the isolation their
	// leases get here.
	if len(got.Sandboxes) == 0 || got.Sandboxes[0].Name != ts.srv.Sandboxes()[0] || got.Sandboxes[0].Isolation == "" || got.Sandboxes[0].Error != "" {
		t.Errorf("sandboxes %+v, want the served ones with their isolation", got.Sandboxes)
	}
	var names []string
	for _, a := range got.Agents {
		names = append(names, a.Name)
		if a.Version == "" || a.Source != server.SourceBuiltIn || a.Keyless == "" || a.File != "" || a.Error != "" {
			t.Errorf("agent %+v: want its pinned version, source built-in, keyless", a)
		}
		if a.Name == "echo" && (!a.Installed || a.Kind != "self") {
			t.Errorf("echo %+v: outpost's own binary is installed", a)
		}
	}
	if d := cmp.Diff(presets.Names(), names); d != "" {
		t.Errorf("agents (-registry +listed):\n%s", d)
	}
	want := server.Agents(nil)
	if d := cmp.Diff(want, got.Agents, cmpopts.IgnoreFields(server.Agent{}, "Path")); d != "" {
		t.Errorf("GET /v1/agents (-server.Agents +served):\n%s", d)
	}

	_, sc := call(t, ts.mcpSession(t, &progress{}), "list_agents", nil)
	var fromMCP []server.Agent
	if err := json.Unmarshal([]byte(mustJSON(sc["agents"])), &fromMCP); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(got.Agents, fromMCP); d != "" {
		t.Errorf("list_agents (-GET /v1/agents +MCP):\n%s", d)
	}
}

// TestAgentsFiles: with an agents directory, the preset files follow the
// built-in presets: loaded ones with their facts, a broken one with its
// error, one named like a built-in left out.
func TestAgentsFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mine.json"), `{"kind": "cli", "version": "1.2.3", "program": "/nonexistent/mine",
  "args": ["{prompt}"], "output": {"format": "text"}}`)
	writeFile(t, filepath.Join(dir, "broken.json"), `{"kind": "cli"}`)
	writeFile(t, filepath.Join(dir, "echo.json"), `{"kind": "cli"}`)
	list := server.Agents(&server.AgentsOptions{Dir: dir})
	files := list[len(presets.Names()):]
	if len(files) != 2 {
		t.Fatalf("files %+v, want broken and mine", files)
	}
	if b := files[0]; b.Name != "broken" || b.Source != server.SourceFile || b.File != filepath.Join(dir, "broken.json") || b.Error == "" {
		t.Errorf("broken: %+v", b)
	}
	m := files[1]
	if m.Name != "mine" || m.Version != "1.2.3" || m.Source != server.SourceFile || m.Program != "/nonexistent/mine" || m.Installed || m.Error != "" {
		t.Errorf("mine: %+v", m)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
