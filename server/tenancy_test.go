package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/server"
)

// tenants are the tokens of a tenancy test: two clients and an operator.
type tenants struct{ alice, bob, admin, wide string }

// withTenants gives the server a tokens file of alice and bob (clients),
// wide (a client whose line allows secrets env, egress open and one
// variable) and admin (an operator).
func withTenants(t *testing.T, dir string) (*tenants, func(*server.Options)) {
	t.Helper()
	path := filepath.Join(dir, "tokens")
	var tn tenants
	for _, x := range []struct {
		name   string
		to     *string
		fields []string
	}{
		{"alice", &tn.alice, nil}, {"bob", &tn.bob, nil}, {"admin", &tn.admin, []string{"operator"}},
		{"wide", &tn.wide, []string{"secrets=gateway,env", "egress=gateway,open", "env=ONLY_THIS"}},
	} {
		tok, err := server.AddToken(path, x.name, x.fields...)
		if err != nil {
			t.Fatal(err)
		}
		*x.to = tok
	}
	tokens, err := server.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return &tn, func(o *server.Options) { o.Tokens = tokens }
}

// as sends a request with token tok.
func (ts *testServer) as(tok, method, path string, body any) (int, []byte) {
	ts.t.Helper()
	code, b, _ := ts.do(method, path, body, "Authorization", "Bearer "+tok)
	return code, b
}

// reasonOf is an error response's code and details.reason.
func reasonOf(t *testing.T, b []byte) (string, string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an error: %s", b)
	}
	r, _ := e.Error.Details["reason"].(string)
	return e.Error.Code, r
}

// TestTenancy: bob gets 404 on every verb of alice's turn and
// conversation, his list holds only his own, and the operator's token
// sees both (issue #43, finding 1).
func TestTenancy(t *testing.T) {
	tn, mod := withTenants(t, t.TempDir())
	ts := start(t, func(o *server.Options) {
		mod(o)
		o.Policy.Secrets = []string{"gateway", "env"} // echo's secret goes in its sandbox
	})

	// A running turn of alice's.
	code, b := ts.as(tn.alice, "POST", "/v1/turns", map[string]any{"prompt": "#slow=5000"})
	var run server.TurnStatus
	if json.Unmarshal(b, &run); code != 202 {
		t.Fatalf("alice's turn: %d %s", code, b)
	}
	for _, v := range []struct{ method, path string }{
		{"GET", "/v1/turns/" + run.ID},
		{"GET", "/v1/turns/" + run.ID + "/events"},
		{"POST", "/v1/turns/" + run.ID + "/messages"},
		{"POST", "/v1/turns/" + run.ID + "/cancel"},
	} {
		var body any
		if strings.HasSuffix(v.path, "/messages") {
			body = map[string]any{"text": "stop"}
		}
		if code, b := ts.as(tn.bob, v.method, v.path, body); code != 404 {
			t.Errorf("bob %s %s: %d %s, want 404", v.method, v.path, code, b)
		}
	}
	if code, b := ts.as(tn.admin, "GET", "/v1/turns/"+run.ID, nil); code != 200 {
		t.Errorf("the operator's GET of alice's turn: %d %s", code, b)
	}
	// GET /v1/turns lists one's own turns only; the operator's, all.
	for _, c := range []struct {
		who, tok string
		sees     bool
	}{{"bob", tn.bob, false}, {"alice", tn.alice, true}, {"the operator", tn.admin, true}} {
		code, b := ts.as(c.tok, "GET", "/v1/turns", nil)
		if code != 200 || strings.Contains(string(b), run.ID) != c.sees {
			t.Errorf("%s's GET /v1/turns: %d %s; alice's turn listed: want %v", c.who, code, b, c.sees)
		}
	}
	if code, b := ts.as(tn.alice, "POST", "/v1/turns/"+run.ID+"/cancel", nil); code != 202 {
		t.Errorf("alice's cancel: %d %s", code, b)
	}

	// A stored conversation of alice's, and one of bob's.
	conv := finishedConversation(t, ts, tn.alice, "hello from alice")
	mine := finishedConversation(t, ts, tn.bob, "hello from bob")
	if m, err := ts.store.Meta(t.Context(), conv); err != nil || m.Owner != "token:alice" {
		t.Fatalf("alice's conversation is owned by %q (%v)", m.Owner, err)
	}
	for _, v := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/conversations/" + conv, nil},
		{"GET", "/v1/conversations/" + conv[:12], nil},
		{"GET", "/v1/conversations/" + conv + "/usage", nil},
		{"GET", "/v1/conversations/" + conv + "/export", nil},
		{"GET", "/v1/conversations/" + conv + "/diff", nil},
		{"GET", "/v1/conversations/" + mine + "/diff?to=" + conv, nil},
		{"DELETE", "/v1/conversations/" + conv, nil},
		{"POST", "/v1/turns", map[string]any{"prompt": "mine now", "resume": conv}},
		{"POST", "/v1/turns", map[string]any{"prompt": "mine now", "fork": conv}},
		{"POST", "/v1/races", map[string]any{"prompt": "mine now", "from": conv}},
	} {
		if code, b := ts.as(tn.bob, v.method, v.path, v.body); code != 404 {
			t.Errorf("bob %s %s: %d %s, want 404", v.method, v.path, code, b)
		}
	}
	if ids := listed(t, ts, tn.bob); fmt.Sprint(ids) != fmt.Sprint([]string{mine}) {
		t.Errorf("bob lists %v, want only his %s", ids, mine)
	}
	if ids := listed(t, ts, tn.admin); len(ids) != 2 {
		t.Errorf("the operator lists %v, want both", ids)
	}
	if code, b := ts.as(tn.admin, "GET", "/v1/conversations/"+conv, nil); code != 200 {
		t.Errorf("the operator's GET of alice's conversation: %d %s", code, b)
	}
	if code, b := ts.as(tn.alice, "GET", "/v1/conversations/"+conv, nil); code != 200 {
		t.Errorf("alice's GET of her conversation: %d %s", code, b)
	}
	// A fork is its forker's: alice's fork of her own is hers.
	code, b = ts.as(tn.alice, "POST", "/v1/turns", map[string]any{"prompt": "again", "resume": conv})
	if code != 202 {
		t.Fatalf("alice's resume: %d %s", code, b)
	}
	if code, b := ts.as(tn.bob, "DELETE", "/v1/conversations/"+mine, nil); code != 204 {
		t.Errorf("bob's delete of his own: %d %s", code, b)
	}
	// An import is its importer's, whoever the archive names.
	code, archive := ts.as(tn.alice, "GET", "/v1/conversations/"+conv+"/export", nil)
	if code != 200 {
		t.Fatalf("alice's export: %d", code)
	}
	if err := ts.store.Delete(t.Context(), conv); err != nil {
		t.Fatal(err)
	}
	if code, b, _ := ts.do("POST", "/v1/conversations/import", archive, "Authorization", "Bearer "+tn.bob, "Content-Type", "application/gzip"); code != 201 {
		t.Fatalf("bob's import: %d %s", code, b)
	}
	if code, _ := ts.as(tn.alice, "GET", "/v1/conversations/"+conv, nil); code != 404 {
		t.Errorf("alice's GET of bob's import of her archive: %d, want 404", code)
	}
	if m, err := ts.store.Meta(t.Context(), conv); err != nil || m.Owner != "token:bob" {
		t.Errorf("the import is owned by %q (%v), want token:bob", m.Owner, err)
	}
}

// finishedConversation runs a turn as tok and returns its conversation.
func finishedConversation(t *testing.T, ts *testServer, tok, prompt string) string {
	t.Helper()
	code, b := ts.as(tok, "POST", "/v1/turns", map[string]any{"prompt": prompt})
	var st server.TurnStatus
	if json.Unmarshal(b, &st); code != 202 {
		t.Fatalf("turn: %d %s", code, b)
	}
	old := ts.token
	ts.token = tok
	res := ts.wait(st.ID)
	ts.token = old
	conv, _ := res["conversation"].(string)
	if conv == "" {
		t.Fatalf("turn %s stored no conversation: %v", st.ID, res)
	}
	return conv
}

func listed(t *testing.T, ts *testServer, tok string) []string {
	t.Helper()
	code, b := ts.as(tok, "GET", "/v1/conversations", nil)
	var l struct{ Conversations []conversation.Meta }
	if json.Unmarshal(b, &l); code != 200 {
		t.Fatalf("list: %d %s", code, b)
	}
	var ids []string
	for _, m := range l.Conversations {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestTenancySurvivesRestart: the owner is stored with the conversation
// (the file store), so a new server keeps bob out of alice's.
func TestTenancySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	tn, mod := withTenants(t, dir)
	store := conversation.NewFS(filepath.Join(dir, "shared-store"))
	withStore := func(o *server.Options) { mod(o); o.Store = store; o.Policy.Secrets = []string{"gateway", "env"} }
	first := start(t, withStore)
	conv := finishedConversation(t, first, tn.alice, "before the restart")
	second := start(t, withStore)
	if code, b := second.as(tn.bob, "GET", "/v1/conversations/"+conv, nil); code != 404 {
		t.Errorf("bob after a restart: %d %s", code, b)
	}
	if code, b := second.as(tn.alice, "GET", "/v1/conversations/"+conv, nil); code != 200 {
		t.Errorf("alice after a restart: %d %s", code, b)
	}
}

// TestPolicy: a client's secrets env, base-URL override, loopback allow
// and a variable of the operator's secrets are refused with 403 and
// reason policy; narrowing is allowed; a token's own line widens its
// policy, and the operator is not bound (issue #43, finding 1).
func TestPolicy(t *testing.T) {
	tn, mod := withTenants(t, t.TempDir())
	ts := start(t, func(o *server.Options) {
		mod(o)
		o.Policy = server.Policy{EgressAllow: []string{"*.example.com", "api.example.org:8443"}} // the defaults, and an allowlist
		o.Environ = append(o.Environ, "ANTHROPIC_AUTH_TOKEN="+canary)
	})
	refused := []map[string]any{
		{"prompt": "hi", "secrets": "env"},
		{"prompt": "hi", "env": map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}},
		{"prompt": "hi", "env": map[string]string{"OPENAI_BASE_URL": "http://attacker.example/"}},
		{"prompt": "hi", "env": map[string]string{"HTTPS_PROXY": "http://attacker.example/"}},
		{"prompt": "hi", "agent": "claude", "env": map[string]string{"ANTHROPIC_API_KEY": "sk-ant-mine"}}, // the operator holds ANTHROPIC_AUTH_TOKEN
		{"prompt": "hi", "env": map[string]string{echo.TokenVariable: "x"}},
		{"prompt": "hi", "env": map[string]string{"SERVICE_TOKEN": "x"}}, // the operator's .outpost/.env secret
		{"prompt": "hi", "egress_allow": []string{"127.0.0.1:8080"}},
		{"prompt": "hi", "egress_allow": []string{"*.example.org"}},
		{"prompt": "hi", "egress_allow": []string{"api.example.org"}},
		{"prompt": "hi", "egress_allow": []string{"evil.example GET /x.example.com"}}, // a rule's path is not its host
		{"prompt": "hi", "egress": "open"},
	}
	for _, req := range refused {
		code, b := ts.as(tn.alice, "POST", "/v1/turns", req)
		if c, r := reasonOf(t, b); code != 403 || c != "refused" || r != server.ReasonPolicy {
			t.Errorf("alice %v: %d %s, want 403 refused policy", req, code, b)
		}
	}
	race := map[string]any{"prompt": "hi", "secrets": "env"}
	if code, b := ts.as(tn.alice, "POST", "/v1/races", race); code != 403 {
		t.Errorf("a race with secrets env: %d %s", code, b)
	}
	narrower := []map[string]any{
		{"prompt": "hi", "secrets": "gateway"},
		{"prompt": "hi", "egress": "gateway", "egress_allow": []string{"docs.example.com", "*.api.example.com", "api.example.org:8443", "docs.example.com GET /x"}},
		{"prompt": "hi", "env": map[string]string{"MY_SETTING": "1"}},
	}
	for _, req := range narrower {
		if code, b := ts.as(tn.alice, "POST", "/v1/turns", req); code != 202 {
			t.Errorf("alice %v: %d %s, want 202", req, code, b)
		}
	}
	// wide's line allows secrets env and egress open, and only ONLY_THIS.
	if code, b := ts.as(tn.wide, "POST", "/v1/turns", map[string]any{"prompt": "hi", "secrets": "env", "egress": "open"}); code != 202 {
		t.Errorf("wide's secrets env: %d %s", code, b)
	}
	if code, b := ts.as(tn.wide, "POST", "/v1/turns", map[string]any{"prompt": "hi", "env": map[string]string{"MY_SETTING": "1"}}); code != 403 {
		t.Errorf("wide's MY_SETTING: %d %s", code, b)
	}
	if code, b := ts.as(tn.wide, "POST", "/v1/turns", map[string]any{"prompt": "hi", "env": map[string]string{"ANTHROPIC_BASE_URL": "http://x/"}}); code != 403 {
		t.Errorf("wide's base URL: %d %s", code, b)
	}
	if code, b := ts.as(tn.admin, "POST", "/v1/turns", map[string]any{"prompt": "hi", "secrets": "env"}); code != 202 {
		t.Errorf("the operator's secrets env: %d %s", code, b)
	}
	// Asking for the gateway is not enough: echo cannot use it, and its
	// secret (the canary) would enter the sandbox by the fallback to env.
	old := ts.token
	ts.token = tn.alice
	res := ts.startTurn(map[string]any{"prompt": "hi"})
	line := ts.wait(res.ID)
	ts.token = old
	if e, _ := line["error"].(map[string]any); e == nil || e["code"] != "refused" || !strings.Contains(fmt.Sprint(e["message"]), "only the credential gateway") {
		t.Errorf("a client's echo turn with the operator's secret: %v", line)
	}
}

// TestTokensFileFields: the optional fields of a tokens file line are
// read, and a bad one is refused with its line.
func TestTokensFileFields(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	if _, err := server.AddToken(path, "x", "secrets=gateway,bogus"); err == nil {
		t.Error("AddToken took secrets mode bogus")
	}
	if _, err := server.AddToken(path, "y", "admin"); err == nil {
		t.Error("AddToken took an unknown field")
	}
	os.WriteFile(path, []byte("old sha256:"+strings.Repeat("ab", 32)+"\n"), 0o600)
	if _, err := server.LoadTokens(path); err != nil {
		t.Errorf("a tokens file of before the fields: %v", err)
	}
	os.WriteFile(path, []byte("old sha256:"+strings.Repeat("ab", 32)+" egress-allow=http://x\n"), 0o600)
	if _, err := server.LoadTokens(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a bad allowlist entry: %v", err)
	}
}

// TestTenancyMCP: /mcp follows the same rule: bob's get_conversation,
// diff and run_turn resume of alice's conversation find nothing, his
// list_conversations holds only his own, and the operator's lists both.
func TestTenancyMCP(t *testing.T) {
	tn, mod := withTenants(t, t.TempDir())
	ts := start(t, mod)
	conv := finishedConversation(t, ts, tn.alice, "hello from alice")
	session := func(tok string) *mcp.ClientSession {
		old := ts.token
		ts.token = tok
		defer func() { ts.token = old }()
		return ts.mcpSession(t, &progress{})
	}
	bob := session(tn.bob)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"get_conversation", map[string]any{"id": conv}},
		{"diff", map[string]any{"ref": conv}},
		{"run_turn", map[string]any{"prompt": "mine now", "resume": conv}},
	} {
		res, sc := call(t, bob, c.tool, c.args)
		if !res.IsError || errCode(sc) != "conversation" || !strings.Contains(text(res), "not found") {
			t.Errorf("bob's %s of alice's conversation: %s %v", c.tool, text(res), sc)
		}
	}
	count := func(cs *mcp.ClientSession) int {
		_, sc := call(t, cs, "list_conversations", nil)
		l, _ := sc["conversations"].([]any)
		return len(l)
	}
	if n := count(bob); n != 0 {
		t.Errorf("bob lists %d conversations, want none", n)
	}
	if n := count(session(tn.admin)); n != 1 {
		t.Errorf("the operator lists %d conversations, want alice's", n)
	}
	if n := count(session(tn.alice)); n != 1 {
		t.Errorf("alice lists %d conversations, want hers", n)
	}
}
