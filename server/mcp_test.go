package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost/server"
)

// bearer adds a token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// progress collects a session's progress notifications.
type progress struct {
	mu     sync.Mutex
	events []map[string]any
	onMsg  func() // called on the first message event
}

func (p *progress) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	var ev map[string]any
	if err := json.Unmarshal([]byte(req.Params.Message), &ev); err != nil {
		ev = map[string]any{"undecodable": req.Params.Message}
	}
	p.mu.Lock()
	p.events = append(p.events, ev)
	first := ev["type"] == "message" && p.onMsg != nil
	f := p.onMsg
	if first {
		p.onMsg = nil
	}
	p.mu.Unlock()
	if first {
		f()
	}
}

func (p *progress) types() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.events {
		if t, _ := e["type"].(string); !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// mcpSession connects the Go SDK's client to the server's /mcp with the
// test token.
func (ts *testServer) mcpSession(t *testing.T, p *progress) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "outpost-test", Version: "v0"}, &mcp.ClientOptions{ProgressNotificationHandler: p.handle})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   ts.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{ts.token, http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns the result and its structured content.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken(name)
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var sc map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return res, sc
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func errCode(sc map[string]any) any {
	e, _ := sc["error"].(map[string]any)
	return e["code"]
}

// TestMCPTools: the Go SDK's client over streamable HTTP lists the tools
// and runs a turn (progress carries its events), resumes and forks it,
// asks for a structured answer, reads conversations and agents, and gets
// outpost's codes for what it gets wrong.
func TestMCPTools(t *testing.T) {
	ts := start(t, nil)
	p := &progress{}
	cs := ts.mcpSession(t, p)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if diff := cmp.Diff([]string{"diff", "get_conversation", "list_agents", "list_conversations", "race", "run_turn"}, slices.Sorted(slices.Values(names))); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}

	res, sc := call(t, cs, "run_turn", map[string]any{"prompt": "hello #tool", "agent": "echo"})
	conv, _ := sc["conversation"].(string)
	if res.IsError || conv == "" || !strings.Contains(text(res), "hello") || !strings.Contains(text(res), conv) {
		t.Fatalf("run_turn: error %v, text %q, structured %v", res.IsError, text(res), sc)
	}
	// The notice: the echo preset has no endpoint, so its token enters
	// the sandbox (secrets mode env).
	if diff := cmp.Diff([]string{"notice", "session", "tool_call", "tool_result", "message", "finished"}, p.types()); diff != "" {
		t.Errorf("progress event types %v (-want +got):\n%s", p.types(), diff)
	}

	res, sc = call(t, cs, "run_turn", map[string]any{"prompt": "and again", "resume": conv[:8]})
	if res.IsError || sc["conversation"] != conv {
		t.Errorf("resume: error %v, structured %v", res.IsError, sc)
	}
	res, sc = call(t, cs, "run_turn", map[string]any{"prompt": "another way", "fork": conv})
	if res.IsError || sc["conversation"] == conv || sc["parent"] != conv {
		t.Errorf("fork: error %v, structured %v", res.IsError, sc)
	}

	schema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}}
	res, sc = call(t, cs, "run_turn", map[string]any{"prompt": `count #json={"n":3}`, "schema": schema, "timeout": "1m"})
	if diff := cmp.Diff(map[string]any{"n": 3.0}, sc["output"]); res.IsError || diff != "" {
		t.Errorf("structured answer: error %v, output (-want +got):\n%s", res.IsError, diff)
	}
	if strings.TrimSpace(strings.Split(text(res), "\n")[0]) != `{"n":3}` {
		t.Errorf("structured answer's text: %q", text(res))
	}

	_, sc = call(t, cs, "get_conversation", map[string]any{"id": conv})
	if sc["id"] != conv || sc["turns"] != 2.0 {
		t.Errorf("get_conversation: %v", sc)
	}
	_, sc = call(t, cs, "list_conversations", nil)
	if l, _ := sc["conversations"].([]any); len(l) != 3 {
		t.Errorf("list_conversations: %d conversations, want 3: %v", len(l), sc)
	}
	_, sc = call(t, cs, "list_agents", nil)
	if !strings.Contains(mustJSON(sc), `"name":"echo"`) {
		t.Errorf("list_agents: %v", sc)
	}

	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		code       string
	}{
		{"blank prompt", "run_turn", map[string]any{"prompt": " "}, "configuration"},
		{"unknown agent", "run_turn", map[string]any{"prompt": "x", "agent": "nope"}, "configuration"},
		{"sandbox not served", "run_turn", map[string]any{"prompt": "x", "sandbox": "docker"}, "configuration"},
		{"bad timeout", "run_turn", map[string]any{"prompt": "x", "timeout": "soon"}, "configuration"},
		{"resume and fork", "run_turn", map[string]any{"prompt": "x", "resume": conv, "fork": conv}, "configuration"},
		{"unknown conversation", "run_turn", map[string]any{"prompt": "x", "resume": "c0000000000"}, "conversation"},
		{"bad schema", "run_turn", map[string]any{"prompt": "x", "schema": map[string]any{"type": 7}}, "configuration"},
		{"quota", "run_turn", map[string]any{"prompt": "#quota"}, "quota"},
		{"invalid reference", "get_conversation", map[string]any{"id": "../x"}, "conversation"},
		{"no such conversation", "get_conversation", map[string]any{"id": "c0000000000"}, "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, sc := call(t, cs, tc.tool, tc.args)
			if !res.IsError || errCode(sc) != tc.code || !strings.HasPrefix(text(res), "outpost: "+tc.code+": ") {
				t.Errorf("isError %v, text %q, structured %v; want code %s", res.IsError, text(res), sc, tc.code)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMCPAuth: /mcp is behind the server's authentication.
func TestMCPAuth(t *testing.T) {
	ts := start(t, nil)
	for _, tc := range []struct{ name, token string }{{"none", ""}, {"wrong", "not-a-token"}} {
		t.Run(tc.name, func(t *testing.T) {
			hc := &http.Client{}
			if tc.token != "" {
				hc.Transport = bearer{tc.token, http.DefaultTransport}
			}
			c := mcp.NewClient(&mcp.Implementation{Name: "outpost-test", Version: "v0"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
			if err == nil {
				cs.Close()
				t.Fatal("connected without a valid token")
			}
			if !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "Unauthorized") {
				t.Errorf("error %v, want a 401", err)
			}
		})
	}
}

// TestUnauthorizedNamesTheFix: a 401 (of /mcp as of the rest of the API)
// names the token and how to make one, in its body and in its
// WWW-Authenticate (RFC 6750's error and error_description), so that an
// MCP client such as the inspector shows it instead of starting OAuth.
func TestUnauthorizedNamesTheFix(t *testing.T) {
	ts := start(t, nil)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	challenge := regexp.MustCompile(`^Bearer realm="outpost", error="invalid_token", error_description="([^"\\]*)"$`)
	for _, tc := range []struct{ name, path, auth string }{
		{"mcp without a token", "/mcp", ""},
		{"mcp with a wrong token", "/mcp", "Bearer opt_wrong"},
		{"mcp with another scheme", "/mcp", "Basic dXNlcjpwYXNz"},
		{"api without a token", "/v1/agents", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, body := "GET", any(nil)
			if tc.path == "/mcp" {
				method, body = "POST", initialize
			}
			code, b, h := ts.do(method, tc.path, body, "Authorization", tc.auth, "Accept", "application/json, text/event-stream")
			if code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", code, b)
			}
			var e server.ErrorResponse
			if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
				t.Fatalf("not the error shape: %s", b)
			}
			if e.Error.Code != "refused" || e.Error.Details["reason"] != "unauthorized" {
				t.Errorf("code %s, reason %v; want refused, unauthorized", e.Error.Code, e.Error.Details["reason"])
			}
			for _, s := range []string{"outpost serve token add NAME", "Authorization: Bearer TOKEN"} {
				if !strings.Contains(e.Error.Message, s) {
					t.Errorf("the message %q does not say %q", e.Error.Message, s)
				}
			}
			m := challenge.FindStringSubmatch(h.Get("WWW-Authenticate"))
			if m == nil {
				t.Fatalf("WWW-Authenticate %q is not an RFC 6750 challenge with an error_description", h.Get("WWW-Authenticate"))
			}
			if m[1] != e.Error.Message {
				t.Errorf("error_description %q, want the message %q", m[1], e.Error.Message)
			}
		})
	}
}

// TestMCPCancel: cancelling a run_turn call cancels the turn, whose
// sandbox is released; the server counts it cancelled by the client.
func TestMCPCancel(t *testing.T) {
	ts := start(t, func(o *server.Options) { o.PoolSize = -1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &progress{onMsg: cancel}
	cs := ts.mcpSession(t, p)
	params := &mcp.CallToolParams{Name: "run_turn", Arguments: map[string]any{"prompt": "#slow=2000"}}
	params.SetProgressToken(1)
	_, err := cs.CallTool(ctx, params)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool: %v, want context.Canceled", err)
	}
	// The server ends the turn on its own time: wait for its count.
	deadline := time.Now().Add(time.Minute)
	for {
		_, b, _ := ts.do("GET", "/metrics", nil)
		m := string(b)
		if strings.Contains(m, `outpost_turns_total{agent="echo",code="cancelled",sandbox="local"} 1`) && strings.Contains(m, "outpost_turns_running 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn was not cancelled: metrics\n%s", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPWorkspaces: run_turn in a new workspace with a check, the diff
// tool in its three formats, and a race of three echo contestants whose
// check passes for the second only, its progress as notifications; the
// codes of what a client gets wrong.
func TestMCPWorkspaces(t *testing.T) {
	ts, _ := startHome(t, nil)
	p := &progress{}
	cs := ts.mcpSession(t, p)

	res, sc := call(t, cs, "run_turn", map[string]any{"prompt": "#write=out.txt go", "workspace": "new", "check": "test -f out.txt"})
	conv, _ := sc["conversation"].(string)
	cp, _ := sc["checkpoint"].(map[string]any)
	check, _ := sc["check"].(map[string]any)
	if res.IsError || conv == "" || cp["turn"] != 1.0 || check["passed"] != true || sc["workdir"] == "" {
		t.Fatalf("run_turn in a new workspace: error %v, structured %v", res.IsError, sc)
	}
	res, sc = call(t, cs, "run_turn", map[string]any{"prompt": "#write=two.txt more", "resume": conv, "workspace": "new", "check": "test -f out.txt", "checkpoint": "on"})
	if res.IsError || sc["checkpoint"].(map[string]any)["turn"] != 2.0 {
		t.Fatalf("resume: %v", sc)
	}

	res, sc = call(t, cs, "diff", map[string]any{"ref": conv})
	if res.IsError || !strings.Contains(text(res), "+++ b/two.txt") || strings.Contains(text(res), "out.txt") || len(sc["files"].([]any)) != 1 {
		t.Errorf("diff of the last turn: error %v, text %q, structured %v", res.IsError, text(res), sc)
	}
	res, _ = call(t, cs, "diff", map[string]any{"ref": conv + "@1", "format": "stat"})
	if res.IsError || !strings.Contains(text(res), "out.txt") || !strings.Contains(text(res), "1 file(s) changed") {
		t.Errorf("diff --stat of turn 1: %q", text(res))
	}
	res, sc = call(t, cs, "diff", map[string]any{"ref": conv + "@1", "to": conv + "@2", "format": "json"})
	if res.IsError || !strings.HasPrefix(text(res), `{"from":"`) || sc["added"] != 1.0 {
		t.Errorf("diff of turn 1 to 2: %q %v", text(res), sc)
	}

	p.mu.Lock()
	p.events = nil
	p.mu.Unlock()
	res, sc = call(t, cs, "race", map[string]any{"prompt": "#write=out.txt solve it", "agents": []string{"echo"}, "count": 3, "check": raceCheck, "timeout": "1m"})
	race, _ := sc["race"].(map[string]any)
	results, _ := sc["results"].([]any)
	if res.IsError || race["winner"] != 1.0 || len(results) != 3 || !strings.HasPrefix(text(res), "winner: contestant 1 (echo)") {
		t.Fatalf("race: error %v, text %q, structured %v", res.IsError, text(res), sc)
	}
	for i, r := range results {
		l := r.(map[string]any)
		if l["contestant"] != float64(i) || l["check"].(map[string]any)["passed"] != (i == 1) {
			t.Errorf("contestant %d's result line: %v", i, l)
		}
	}
	if types := p.types(); !slices.Contains(types, "progress") || !slices.Contains(types, "message") || slices.Contains(types, "result") || slices.Contains(types, "race") {
		t.Errorf("race progress notifications of types %v", types)
	}
	p.mu.Lock()
	for _, e := range p.events {
		if _, ok := e["contestant"].(float64); !ok {
			t.Errorf("a notification without its contestant: %v", e)
		}
	}
	p.mu.Unlock()

	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		code       string
	}{
		{"workspace the client names", "run_turn", map[string]any{"prompt": "x", "workspace": "/etc"}, "configuration"},
		{"unknown checkpoint mode", "run_turn", map[string]any{"prompt": "x", "checkpoint": "maybe"}, "configuration"},
		{"fork at an unknown turn", "run_turn", map[string]any{"prompt": "x", "fork": conv + "@7"}, "conversation"},
		{"diff of an invalid reference", "diff", map[string]any{"ref": "../x"}, "conversation"},
		{"diff at turn 0", "diff", map[string]any{"ref": conv + "@0"}, "configuration"},
		{"diff of an unknown turn", "diff", map[string]any{"ref": conv + "@9"}, "conversation"},
		{"diff in an unknown format", "diff", map[string]any{"ref": conv, "format": "html"}, "configuration"},
		{"race of 17", "race", map[string]any{"prompt": "x", "count": 17}, "configuration"},
		{"race of an unknown agent", "race", map[string]any{"prompt": "x", "agents": []string{"nope"}}, "configuration"},
		{"race with a bad timeout", "race", map[string]any{"prompt": "x", "timeout": "soon"}, "configuration"},
		{"race from an unknown turn", "race", map[string]any{"prompt": "x", "from": conv + "@9"}, "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, sc := call(t, cs, tc.tool, tc.args)
			if !res.IsError || errCode(sc) != tc.code || !strings.HasPrefix(text(res), "outpost: "+tc.code+": ") {
				t.Errorf("isError %v, text %q, structured %v; want code %s", res.IsError, text(res), sc, tc.code)
			}
		})
	}
}

// TestMCPToolSchemas: every tool's input and output schema is one a strict
// client accepts (the MCP inspector's strict mode, Claude Code): an
// object schema whose every field is a schema object with one type,
// never a union with null, never an empty schema.
func TestMCPToolSchemas(t *testing.T) {
	ts := start(t, nil)
	cs := ts.mcpSession(t, &progress{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) == 0 {
		t.Fatal("no tools")
	}
	for _, tool := range res.Tools {
		for what, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if schema == nil {
				t.Errorf("%s: no %s schema", tool.Name, what)
				continue
			}
			var m any
			if err := json.Unmarshal([]byte(mustJSON(schema)), &m); err != nil {
				t.Fatal(err)
			}
			if obj, _ := m.(map[string]any); obj == nil || obj["type"] != "object" {
				t.Errorf("%s: the %s schema is not an object schema: %s", tool.Name, what, mustJSON(schema))
			}
			for _, p := range strictProblems(tool.Name+" "+what, m) {
				t.Error(p)
			}
		}
	}
}

// strictProblems are the places in schema a strict client refuses.
func strictProblems(at string, schema any) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: %v is not a schema object", at, schema)}
	}
	typ, ok := s["type"].(string)
	if !ok {
		return []string{fmt.Sprintf("%s: type %v, want one type", at, s["type"])}
	}
	var out []string
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			out = append(out, strictProblems(at+"."+name, p)...)
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			out = append(out, strictProblems(at+"[*]", ap)...)
		}
	case "array":
		if items, ok := s["items"]; ok {
			out = append(out, strictProblems(at+"[]", items)...)
		}
	}
	return out
}
