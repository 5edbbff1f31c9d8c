package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/server"
)

// TestAPI walks every route with valid and refused requests; every
// exchange is validated against the OpenAPI document, and every
// documented operation must have been exercised.
func TestAPI(t *testing.T) {
	ts := start(t, nil)

	if code, b, _ := ts.do("GET", "/healthz", nil, "Authorization", ""); code != 200 || !strings.Contains(string(b), `"ok"`) {
		t.Fatalf("healthz: %d %s", code, b)
	}
	if code, b, _ := ts.do("GET", "/v1/agents", nil); code != 200 || !strings.Contains(string(b), `"echo"`) {
		t.Fatalf("agents: %d %s", code, b)
	}
	if code, b, _ := ts.do("GET", "/v1/openapi.json", nil); code != 200 || string(b) != string(server.OpenAPI) {
		t.Fatalf("openapi.json: %d", code)
	}

	// A turn, its events, its status.
	st := ts.startTurn(map[string]any{"prompt": "hello #tool #env ECHO_API_KEY #leak ECHO_API_KEY"})
	if st.State != server.StateQueued && st.State != server.StateRunning {
		t.Errorf("new turn state %q", st.State)
	}
	items := ts.events(st.ID, 0, nil)
	for i, it := range items {
		if it.seq != int64(i+1) {
			t.Fatalf("event %d has sequence number %d", i+1, it.seq)
		}
	}
	res := items[len(items)-1].data
	if res["type"] != "result" || res["error"] != nil || res["exit_code"] != 0.0 {
		t.Fatalf("result: %s", items[len(items)-1].raw)
	}
	if text, _ := res["text"].(string); !strings.Contains(text, "ECHO_API_KEY=[REDACTED]") {
		t.Errorf("the leaked variable is not redacted in the answer: %q", text)
	}
	// The modes the turn ran with: echo has no endpoint, so its token
	// entered the sandbox; local egress is open.
	if res["secrets"] != "env" || res["egress"] != "open" {
		t.Errorf("result secrets %v, egress %v; want env and open", res["secrets"], res["egress"])
	}
	if code, b, _ := ts.do("GET", "/v1/agents", nil); code != 200 || !strings.Contains(string(b), `"name":"claude","version":`) || !strings.Contains(string(b), `"keyless":"yes"`) {
		t.Errorf("agents: %d %s, want claude keyless", code, b)
	}
	// A structured answer: the schema reaches the engine and the validated
	// value comes back as the result's output (validated against the
	// OpenAPI document like every exchange).
	st = ts.startTurn(map[string]any{"prompt": `answer #json={"n":3}`, "schema": map[string]any{"type": "object", "required": []string{"n"}}, "repairs": 0})
	items = ts.events(st.ID, 0, nil)
	res = items[len(items)-1].data
	if out, _ := res["output"].(map[string]any); res["error"] != nil || out["n"] != 3.0 {
		t.Errorf("schema turn result: %s", items[len(items)-1].raw)
	}
	// A secret a request passes, and one of .outpost/.env, leaked on purpose.
	for _, leak := range []map[string]any{
		{"prompt": "#leak MY_API_KEY", "env": map[string]string{"MY_API_KEY": canary}},
		{"prompt": "#leak SERVICE_TOKEN"},
	} {
		r := ts.wait(ts.startTurn(leak).ID)
		if text, _ := r["text"].(string); strings.Contains(text, "=") && !strings.Contains(text, "[REDACTED]") && !strings.HasSuffix(text, "=") {
			t.Errorf("leak %v: %q", leak["prompt"], text)
		}
	}
	conv, _ := res["conversation"].(string)
	if conv == "" {
		t.Fatal("no conversation in the result")
	}
	code, b, _ := ts.do("GET", "/v1/turns/"+st.ID, nil)
	var got server.TurnStatus
	json.Unmarshal(b, &got)
	if code != 200 || got.State != server.StateFinished || got.Result == nil || got.Events != int64(len(items)) {
		t.Fatalf("status: %d %s", code, b)
	}
	// The list of turns: newest first, by state, bounded.
	var list, one server.TurnList
	code, b, _ = ts.do("GET", "/v1/turns?state=finished", nil)
	if json.Unmarshal(b, &list); code != 200 || !slices.ContainsFunc(list.Turns, func(x server.TurnStatus) bool { return x.ID == st.ID }) ||
		!slices.IsSortedFunc(list.Turns, func(a, b server.TurnStatus) int { return b.Created.Compare(a.Created) }) {
		t.Errorf("GET /v1/turns?state=finished: %d %s, want %s among the turns, newest first", code, b, st.ID)
	}
	if code, b, _ := ts.do("GET", "/v1/turns?limit=1", nil); code != 200 || json.Unmarshal(b, &one) != nil || len(one.Turns) != 1 || one.Turns[0].ID != list.Turns[0].ID {
		t.Errorf("GET /v1/turns?limit=1: %d %s, want the newest turn only", code, b)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "state=done"} {
		if code, _, _ := ts.do("GET", "/v1/turns?"+q, nil); code != 400 {
			t.Errorf("GET /v1/turns?%s: %d, want 400", q, code)
		}
	}
	// Replay from a sequence number.
	replay := ts.events(st.ID, 2, nil)
	if len(replay) != len(items)-2 || replay[0].seq != 3 || replay[0].raw != items[2].raw {
		t.Errorf("replay after 2: %d items from %d, want %d from 3", len(replay), replay[0].seq, len(items)-2)
	}
	if code, _, _ := ts.do("GET", "/v1/turns/"+st.ID+"/events?after=x", nil); code != 400 {
		t.Errorf("events?after=x: %d, want 400", code)
	}
	// Steering or cancelling a finished turn.
	if code, b, _ := ts.do("POST", "/v1/turns/"+st.ID+"/messages", map[string]any{"text": "more"}); code != 409 || !strings.Contains(string(b), `"refused"`) {
		t.Errorf("steer a finished turn: %d %s, want 409 refused", code, b)
	}
	if code, _, _ := ts.do("POST", "/v1/turns/"+st.ID+"/cancel", nil); code != 200 {
		t.Errorf("cancel a finished turn: %d, want 200", code)
	}

	// The console's routes (TestConsoleAPI tests them in depth): this
	// client token has no limit and is refused the operator's routes.
	consoleRoutes(t, ts, conv)

	// Conversations: list, get, usage, resume, delete.
	code, b, _ = ts.do("GET", "/v1/conversations", nil)
	if code != 200 || !strings.Contains(string(b), conv) {
		t.Fatalf("conversations: %d %s", code, b)
	}
	second := ts.startTurn(map[string]any{"prompt": "again", "resume": conv})
	if r := ts.wait(second.ID); r["conversation"] != conv || r["error"] != nil {
		t.Fatalf("resume: %v", r)
	}
	code, b, _ = ts.do("GET", "/v1/conversations/"+conv[:12], nil)
	if code != 200 || !strings.Contains(string(b), `"turns":2`) {
		t.Errorf("get by prefix: %d %s", code, b)
	}
	code, b, _ = ts.do("GET", "/v1/conversations/"+conv+"/usage", nil)
	if code != 200 || !strings.Contains(string(b), `"turns":2`) {
		t.Errorf("usage: %d %s", code, b)
	}
	// What the last turn changed in the server's directory (nothing:
	// an empty patch), through the diff route (workspace_test.go tests it).
	if code, b, _ := ts.do("GET", "/v1/conversations/"+conv+"/diff?format=json", nil); code != 200 || !strings.Contains(string(b), `"files":[]`) {
		t.Errorf("diff: %d %s", code, b)
	}
	// A race refused (races run in workspace_test.go).
	if code, b, _ := ts.do("POST", "/v1/races", map[string]any{"prompt": "x", "agents": []string{"nope"}}); code != 400 || !strings.Contains(string(b), `"bad_request"`) {
		t.Errorf("race of an unknown agent: %d %s", code, b)
	}
	code, archive, h := ts.do("GET", "/v1/conversations/"+conv[:12]+"/export", nil)
	if code != 200 || h.Get("Content-Type") != "application/gzip" || !bytes.HasPrefix(archive, []byte{0x1f, 0x8b}) {
		t.Fatalf("export: %d %q", code, h.Get("Content-Type"))
	}
	if code, _, _ := ts.do("DELETE", "/v1/conversations/"+conv, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	for _, p := range []string{"/v1/conversations/" + conv, "/v1/conversations/" + conv + "/usage"} {
		if code, _, _ := ts.do("GET", p, nil); code != 404 {
			t.Errorf("GET %s after delete: %d, want 404", p, code)
		}
	}
	if code, _, _ := ts.do("DELETE", "/v1/conversations/"+conv, nil); code != 404 {
		t.Errorf("delete again: %d, want 404", code)
	}
	if code, _, _ := ts.do("POST", "/v1/turns", map[string]any{"prompt": "x", "resume": conv}); code != 404 {
		t.Errorf("resume a deleted conversation: %d, want 404", code)
	}
	// Import what was exported: the conversation is back, once.
	gz := []string{"Content-Type", "application/gzip"}
	if code, b, h := ts.do("POST", "/v1/conversations/import", archive, gz...); code != 201 || !strings.Contains(string(b), `"turns":2`) || h.Get("Location") != "/v1/conversations/"+conv {
		t.Errorf("import: %d %s %q", code, b, h.Get("Location"))
	}
	if code, b, _ := ts.do("POST", "/v1/conversations/import", archive, gz...); code != 409 || !strings.Contains(string(b), `"conflict"`) {
		t.Errorf("import again: %d %s, want 409 conflict", code, b)
	}
	if code, b, _ := ts.do("POST", "/v1/conversations/import", []byte("not an archive"), gz...); code != 400 || !strings.Contains(string(b), `"bad_request"`) {
		t.Errorf("import garbage: %d %s, want 400", code, b)
	}
	if code, _, _ := ts.do("GET", "/v1/conversations/"+conv+"/export", nil); code != 200 {
		t.Errorf("export of the imported conversation: %d", code)
	}
	if code, _, _ := ts.do("DELETE", "/v1/conversations/"+conv, nil); code != 204 {
		t.Errorf("delete the imported conversation: %d", code)
	}

	// Unknown routes and methods, unknown turns.
	if code, _, _ := ts.do("GET", "/v1/turns/t000000000000000000000000", nil); code != 404 {
		t.Errorf("unknown turn: %d", code)
	}
	for _, p := range []string{"/v1/turns/t000000000000000000000000/events", "/v1/turns/nonsense"} {
		if code, _, _ := ts.do("GET", p, nil); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	for _, p := range []string{"/v1/turns/t000000000000000000000000/messages", "/v1/turns/t000000000000000000000000/cancel"} {
		if code, _, _ := ts.do("POST", p, map[string]any{"text": "x"}); code != 404 {
			t.Errorf("POST %s: %d, want 404", p, code)
		}
	}
	if code, b, _ := ts.do("GET", "/v2/turns", nil); code != 404 || !strings.Contains(string(b), `"not_found"`) {
		t.Errorf("unknown route: %d %s", code, b)
	}
	if code, _, h := ts.do("PUT", "/v1/turns", nil); code != 405 || h.Get("Allow") == "" {
		t.Errorf("PUT /v1/turns: %d, want 405 with Allow", code)
	}

	// Metrics: turns by agent, sandbox and code; no secrets.
	code, b, _ = ts.do("GET", "/metrics", nil)
	for _, want := range []string{`outpost_turns_total{agent="echo",code="ok",sandbox="local"} 5`, "outpost_turn_duration_seconds_bucket", `outpost_tokens_total{agent="echo",kind="output"}`, "outpost_turns_queued 0", `outpost_pool_sandboxes{sandbox="local",state="ready"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// A client that wants a turn cancelled while queued or running.
	slow := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
	ts.events(slow.ID, 0, func(it sseItem) bool { return true }) // it runs
	if code, _, _ := ts.do("POST", "/v1/turns/"+slow.ID+"/cancel", nil); code != 202 {
		t.Errorf("cancel: %d, want 202", code)
	}
	r := ts.wait(slow.ID)
	if e, _ := r["error"].(map[string]any); e["code"] != "cancelled" || e["details"].(map[string]any)["cancelled_by"] != "client" {
		t.Errorf("cancelled turn's result: %v", r)
	}

	// Steering a running turn.
	steered := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
	ts.events(steered.ID, 0, func(it sseItem) bool { return it.data["type"] == "message" })
	if code, b, _ := ts.do("POST", "/v1/turns/"+steered.ID+"/messages", map[string]any{"text": "wrap up"}); code != 202 {
		t.Fatalf("steer: %d %s", code, b)
	}
	if r := ts.wait(steered.ID); !strings.Contains(fmt.Sprint(r["text"]), "steered: wrap up") {
		t.Errorf("steered turn's answer: %v", r["text"])
	}

	for _, route := range server.Routes() {
		found := false
		for k := range ts.checker.covered {
			if strings.HasPrefix(k, route+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("route %s was not exercised against the OpenAPI document", route)
		}
	}
}

// TestOpenAPIMatchesRoutes: the document describes exactly the routes the
// server has.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(server.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	slices.Sort(documented)
	routes := slices.Sorted(slices.Values(server.Routes()))
	if !slices.Equal(documented, routes) {
		t.Errorf("OpenAPI operations %v\n!= server routes %v", documented, routes)
	}
}

// TestAbuse: hostile and broken requests each get their status and change
// nothing.
func TestAbuse(t *testing.T) {
	ts := start(t, func(o *server.Options) { o.MaxTimeout = time.Minute })
	big := strings.Repeat("x", 2<<20)
	tests := []struct {
		name, method, path string
		body               any
		hdr                []string
		status             int
		reason             string
	}{
		{"no token", "POST", "/v1/turns", map[string]any{"prompt": "x"}, []string{"Authorization", ""}, 401, "unauthorized"},
		{"wrong token", "POST", "/v1/turns", map[string]any{"prompt": "x"}, []string{"Authorization", "Bearer " + server.TokenPrefix + "wrong"}, 401, "unauthorized"},
		{"basic auth", "GET", "/v1/conversations", nil, []string{"Authorization", "Basic dGVzdDp0ZXN0"}, 401, "unauthorized"},
		{"no token on metrics", "GET", "/metrics", nil, []string{"Authorization", ""}, 401, "unauthorized"},
		{"dot-dot in a conversation id", "GET", "/v1/conversations/..%2F..%2Fetc%2Fpasswd", nil, nil, 400, "bad_request"},
		{"dot-dot delete", "DELETE", "/v1/conversations/..%2Fx", nil, nil, 400, "bad_request"},
		{"dot-dot segment", "GET", "/v1/conversations/../agents", nil, nil, 400, "bad_request"},
		{"dots inside an id", "GET", "/v1/conversations/a..b", nil, nil, 400, "bad_request"},
		{"dot-dot resume", "POST", "/v1/turns", map[string]any{"prompt": "x", "resume": "../../etc"}, nil, 400, "bad_request"},
		{"oversized body", "POST", "/v1/turns", map[string]any{"prompt": big}, nil, 413, "too_large"},
		{"oversized steer", "POST", "/v1/turns/t000000000000000000000000/messages", map[string]any{"text": big}, nil, 404, "not_found"},
		{"unknown field", "POST", "/v1/turns", map[string]any{"prompt": "x", "workdir": "/etc"}, nil, 400, "bad_request"},
		{"schema too large", "POST", "/v1/turns", map[string]any{"prompt": "x", "schema": map[string]any{"description": strings.Repeat("y", 70<<10)}}, nil, 413, "too_large"},
		{"unknown protocol", "POST", "/v1/turns", map[string]any{"prompt": "x", "protocol": "nope"}, nil, 400, "bad_request"},
		{"negative repairs", "POST", "/v1/turns", map[string]any{"prompt": "x", "repairs": -1}, nil, 400, "bad_request"},
		{"unknown secrets mode", "POST", "/v1/turns", map[string]any{"prompt": "x", "secrets": "vault"}, nil, 400, "bad_request"},
		{"unknown egress mode", "POST", "/v1/turns", map[string]any{"prompt": "x", "egress": "closed"}, nil, 400, "bad_request"},
		{"bad egress allowlist", "POST", "/v1/turns", map[string]any{"prompt": "x", "egress_allow": []string{"http://x.example/"}}, nil, 400, "bad_request"},
		{"allowlist with open egress", "POST", "/v1/turns", map[string]any{"prompt": "x", "egress": "open", "egress_allow": []string{"x.example"}}, nil, 400, "bad_request"},
		{"timeout over the ceiling", "POST", "/v1/turns", map[string]any{"prompt": "x", "timeout_ms": 3_600_000}, nil, 400, "bad_request"},
		{"negative timeout", "POST", "/v1/turns", map[string]any{"prompt": "x", "timeout_ms": -1}, nil, 400, "bad_request"},
		{"setting not allowed", "POST", "/v1/turns", map[string]any{"prompt": "x", "settings": map[string]string{"host": "tcp://192.0.2.1:2375"}}, nil, 400, "bad_request"},
		{"sandbox not served", "POST", "/v1/turns", map[string]any{"prompt": "x", "sandbox": "docker"}, nil, 400, "bad_request"},
		{"unknown agent", "POST", "/v1/turns", map[string]any{"prompt": "x", "agent": "nope"}, nil, 400, "bad_request"},
		{"empty prompt", "POST", "/v1/turns", map[string]any{"prompt": "  "}, nil, 400, "bad_request"},
		{"resume and fork", "POST", "/v1/turns", map[string]any{"prompt": "x", "resume": "c1", "fork": "c2"}, nil, 400, "bad_request"},
		{"bad variable name", "POST", "/v1/turns", map[string]any{"prompt": "x", "env": map[string]string{"A=B": "c"}}, nil, 400, "bad_request"},
		{"empty body", "POST", "/v1/turns", "", nil, 400, "bad_request"},
		{"not JSON", "POST", "/v1/turns", "prompt=x", nil, 400, "bad_request"},
		{"two objects", "POST", "/v1/turns", `{"prompt":"x"}{"prompt":"y"}`, nil, 400, "bad_request"},
		{"wrong type", "POST", "/v1/turns", `{"prompt":1}`, nil, 400, "bad_request"},
		{"invalid UTF-8", "POST", "/v1/turns", []byte("{\"prompt\":\"\xff\xfe\",\"agent\":\"\xff\"}"), nil, 400, "bad_request"},
		{"unknown conversation", "GET", "/v1/conversations/c0000000000000000000000", nil, nil, 404, "not_found"},
		{"bad Last-Event-ID", "GET", "/v1/turns/t000000000000000000000000/events", nil, nil, 404, "not_found"},
		{"negative inactivity", "POST", "/v1/turns", map[string]any{"prompt": "x", "inactivity_ms": -1}, nil, 400, "bad_request"},
		{"unknown echo option", "POST", "/v1/turns", map[string]any{"prompt": "x", "options": map[string]string{"budget": "1"}}, nil, 400, "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b, h := ts.do(tc.method, tc.path, tc.body, tc.hdr...)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			var e server.ErrorResponse
			if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
				t.Fatalf("not the error shape: %s", b)
			}
			if e.Error.Details["reason"] != tc.reason {
				t.Errorf("reason %v, want %s", e.Error.Details["reason"], tc.reason)
			}
			if code == 401 && h.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// No side effect: no turn ran, nothing was stored.
	code, b, _ := ts.do("GET", "/metrics", nil)
	if code != 200 || strings.Contains(string(b), "outpost_turns_total{") {
		t.Errorf("a refused request ran a turn:\n%s", grep(string(b), "outpost_turns_total"))
	}
	if list, _ := ts.store.List(context.Background()); len(list) != 0 {
		t.Errorf("a refused request stored %d conversations", len(list))
	}
	if !strings.Contains(string(b), `outpost_http_rejected_total{reason="unauthorized"} 4`) {
		t.Errorf("rejections are not counted: %s", grep(string(b), "rejected"))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSlowHeaders: a client that never finishes its headers is dropped
// after ReadHeaderTimeout, and does not hold the server.
func TestSlowHeaders(t *testing.T) {
	srv, err := server.New(&server.Options{Workdir: t.TempDir(), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	hs.ReadHeaderTimeout = 100 * time.Millisecond
	go srv.Serve(ln, hs)
	defer srv.Shutdown(context.Background())
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not a measurement
	_, err = io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a slow-header connection open")
	}
	// The server still serves others.
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after a slow client: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestPeerCredentials: on a Unix socket only the allowed uids are served
// (by default the server's own); another user gets 403 even when the
// socket's permissions let it connect. An allowed uid other than the
// server's is a client, not the operator (issue 43): the client policy
// refuses its secrets mode env, and the operator's turn is not found for
// it; the server's own uid is the operator.
func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to run a client as another user)", "run the suite as root, as CI does")
	}
	dir, err := os.MkdirTemp("", "outpost-peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "s.sock")
	const nobody, stranger = 65534, 65533
	srv, err := server.New(&server.Options{Workdir: t.TempDir(), Environ: []string{}, AllowUIDs: []int{os.Geteuid(), nobody}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o777) // only the peer check stands in the way
	go srv.Serve(ln, nil)
	defer srv.Shutdown(context.Background())
	// The test binary, where another user can run it.
	self, _ := os.Executable()
	bin := filepath.Join(dir, "client")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(uid int, req string) (string, []byte) {
		cmd := exec.Command(bin)
		cmd.Env = []string{clientEnv + "=" + sock, clientReqEnv + "=" + req}
		cmd.Dir = dir
		if uid != os.Geteuid() {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		status, body, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		return status, []byte(body)
	}
	if got, _ := run(stranger, "GET /v1/agents"); got != "403" {
		t.Errorf("a user not allowed: %s, want 403", got)
	}
	if got, _ := run(os.Geteuid(), "GET /v1/agents"); got != "200" {
		t.Errorf("the same user: %s, want 200", got)
	}
	envTurn := `POST /v1/turns {"prompt":"hi","secrets":"env"}`
	if got, b := run(nobody, envTurn); got != "403" {
		t.Errorf("an allowed client uid asking for secrets env: %s %s, want 403", got, b)
	} else if c, r := reasonOf(t, b); c != "refused" || r != server.ReasonPolicy {
		t.Errorf("an allowed client uid asking for secrets env: %s %s, want refused policy", c, r)
	}
	got, b := run(os.Geteuid(), envTurn)
	var turn struct{ ID string }
	if err := json.Unmarshal(b, &turn); got != "202" || err != nil || turn.ID == "" {
		t.Fatalf("the operator's secrets env turn: %s %s, want 202", got, b)
	}
	if got, b := run(nobody, "GET /v1/turns/"+turn.ID); got != "404" {
		t.Errorf("an allowed client uid reading the operator's turn: %s %s, want 404", got, b)
	}
	if got, b := run(os.Geteuid(), "GET /v1/turns/"+turn.ID); got != "200" {
		t.Errorf("the operator reading its turn: %s %s", got, b)
	}
}

// TestSSEReconnect: a client that drops the stream mid-turn and comes
// back with Last-Event-ID loses nothing and sees nothing twice.
func TestSSEReconnect(t *testing.T) {
	ts := start(t, nil)
	st := ts.startTurn(map[string]any{"prompt": "#slow=40"})
	var all []sseItem
	last := int64(0)
	for round := 0; ; round++ {
		// Each connection takes three events and hangs up, until the end.
		n := 0
		items := ts.events(st.ID, last, func(sseItem) bool { n++; return n == 3 })
		all = append(all, items...)
		if len(items) == 0 {
			t.Fatal("a reconnection got nothing")
		}
		last = items[len(items)-1].seq
		if items[len(items)-1].data["type"] == "result" {
			break
		}
		if round > 100 {
			t.Fatal("no end")
		}
	}
	whole := ts.events(st.ID, 0, nil)
	if len(all) != len(whole) {
		t.Fatalf("reconnecting gave %d events, the whole stream has %d", len(all), len(whole))
	}
	for i := range all {
		if all[i].seq != int64(i+1) || all[i].raw != whole[i].raw {
			t.Fatalf("event %d: seq %d %s, want %s", i+1, all[i].seq, all[i].raw, whole[i].raw)
		}
	}
}

// TestQueueLimits: beyond the running turns and the queue, 429 with
// Retry-After; a queued turn cancelled never runs.
func TestQueueLimits(t *testing.T) {
	ts := start(t, func(o *server.Options) { o.MaxConcurrent, o.MaxQueue = 1, 1 })
	a := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
	ts.events(a.ID, 0, func(sseItem) bool { return true })
	b := ts.startTurn(map[string]any{"prompt": "hello"})
	if b.State != server.StateQueued {
		t.Errorf("second turn %s, want queued", b.State)
	}
	code, body, h := ts.do("POST", "/v1/turns", map[string]any{"prompt": "hello"})
	if code != 429 || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"busy"`) {
		t.Fatalf("third turn: %d %s (Retry-After %q), want 429 busy", code, body, h.Get("Retry-After"))
	}
	code, body, _ = ts.do("GET", "/healthz", nil)
	if !strings.Contains(string(body), `"running":1`) || !strings.Contains(string(body), `"queued":1`) {
		t.Errorf("healthz: %s", body)
	}
	ts.do("POST", "/v1/turns/"+b.ID+"/cancel", nil)
	ts.do("POST", "/v1/turns/"+a.ID+"/cancel", nil)
	rb := ts.wait(b.ID)
	if e, _ := rb["error"].(map[string]any); e["code"] != "cancelled" || len(ts.events(b.ID, 0, nil)) != 1 {
		t.Errorf("queued turn cancelled: %v", rb)
	}
	ts.wait(a.ID)
	// Room again.
	ts.wait(ts.startTurn(map[string]any{"prompt": "hello"}).ID)
}

// TestShutdownDrains: turns running at shutdown get the grace, then are
// cancelled with their conversations captured; new turns are refused
// meanwhile.
func TestShutdownDrains(t *testing.T) {
	ts := start(t, func(o *server.Options) { o.MaxConcurrent, o.Grace = 10, 300*time.Millisecond })
	type stream struct {
		id    string
		items chan []sseItem
	}
	var streams []stream
	for range 10 {
		st := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
		s := stream{st.ID, make(chan []sseItem, 1)}
		req, _ := http.NewRequest("GET", ts.url+"/v1/turns/"+st.ID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+ts.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Wait for its session event: the agent is running (a notice of
		// kind secrets may come first: the echo token enters the sandbox).
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"type":"session"`) {
				break
			}
		}
		go func() {
			defer resp.Body.Close()
			items, _ := readSSE(br, nil)
			s.items <- items
		}()
		streams = append(streams, s)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done <- ts.srv.Shutdown(ctx)
	}()
	// Draining: new turns are refused.
	for {
		code, _, _ := ts.do("GET", "/healthz", nil)
		if code == 503 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not timing
	}
	if code, b, h := ts.do("POST", "/v1/turns", map[string]any{"prompt": "x"}); code != 503 || h.Get("Retry-After") == "" {
		t.Errorf("a turn while draining: %d %s", code, b)
	}
	for _, s := range streams {
		items := <-s.items
		if len(items) == 0 || items[len(items)-1].data["type"] != "result" {
			t.Fatalf("turn %s: the stream ended without its result", s.id)
		}
		r := items[len(items)-1].data
		e, _ := r["error"].(map[string]any)
		if e["code"] != "cancelled" || e["details"].(map[string]any)["cancelled_by"] != "shutdown" {
			t.Errorf("turn %s: %v", s.id, r)
		}
		conv, _ := r["conversation"].(string)
		if conv == "" {
			t.Errorf("turn %s: no conversation captured", s.id)
		} else if _, err := ts.store.Meta(context.Background(), conv); err != nil {
			t.Errorf("turn %s: conversation %s: %v", s.id, conv, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
