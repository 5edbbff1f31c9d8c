package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/turnstore"
)

// consoleServer is TestConsoleAPI's server: the tenants, token limits for
// alice (hour and day) and bob (day), a fleet of one replica ("r1") on an
// in-process turn store that also knows a live replica "r2" and the
// unfinished turn of a replica "gone" that never beat, and local leases
// under a directory holding one home a dead process left.
func consoleServer(t *testing.T) (*testServer, *tenants, string) {
	tn, mod := withTenants(t, t.TempDir())
	st := turnstore.NewMemory()
	ctx := context.Background()
	if err := st.Beat(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, turnstore.Turn{ID: "t" + strings.Repeat("0", 24), Owner: "gone", Agent: "echo", Sandbox: "local", State: turnstore.StateRunning, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dead := filepath.Join(root, "local-dead")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour) // a home without an owner record, over a minute old
	os.Chtimes(dead, old, old)
	ts := start(t, func(o *server.Options) {
		mod(o)
		o.Policy.Secrets = []string{"gateway", "env"} // echo's secret goes in its sandbox
		o.TokenLimits = map[string]server.TokenLimit{"alice": {PerHour: 1000, PerDay: 5000}, "bob": {PerDay: 10}}
		o.Turns, o.Replica, o.Heartbeat = st, "r1", time.Hour
		o.Settings = map[string]map[string]string{"local": {"root": root}}
	})
	return ts, tn, dead
}

// TestConsoleAPI: the routes the console reads. Each token sees its own
// limit (the operator every one); the fleet and garbage collection are
// the operator's (403 for a client); a dry run lists a dead process's
// home and keeps it, a run removes it and is the last run; a running
// turn reports its replica, model and prompt (redacted), a finished one
// its tokens; a conversation's history holds its prompts and answers,
// for its owner and the operator only; budget and max_tokens reach the
// turn.
func TestConsoleAPI(t *testing.T) {
	ts, tn, dead := consoleServer(t)
	t.Run("limits", func(t *testing.T) { consoleLimits(t, ts, tn) })
	t.Run("fleet", func(t *testing.T) { consoleFleet(t, ts, tn) })
	t.Run("gc", func(t *testing.T) { consoleGC(t, ts, tn, dead) })
	t.Run("turns", func(t *testing.T) { consoleTurns(t, ts, tn) })
}

func decode[T any](t *testing.T, code int, b []byte, what string) T {
	t.Helper()
	var v T
	if code != 200 {
		t.Fatalf("%s: %d %s", what, code, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, b)
	}
	return v
}

func consoleLimits(t *testing.T, ts *testServer, tn *tenants) {
	names := func(tok string) []string {
		code, b := ts.as(tok, "GET", "/v1/limits", nil)
		var out []string
		for _, l := range decode[server.Limits](t, code, b, "limits").Limits {
			out = append(out, l.Token)
		}
		return out
	}
	for _, c := range []struct{ who, tok, want string }{{"alice", tn.alice, "alice"}, {"bob", tn.bob, "bob"}, {"the operator", tn.admin, "alice bob"}, {"wide", tn.wide, ""}} {
		if got := strings.Join(names(c.tok), " "); got != c.want {
			t.Errorf("%s's limits: %q, want %q", c.who, got, c.want)
		}
	}
	code, b := ts.as(tn.alice, "GET", "/v1/limits", nil)
	l := decode[server.Limits](t, code, b, "alice's limits").Limits[0]
	now := time.Now()
	if l.Hour == nil || l.Hour.Limit != 1000 || l.Hour.Used != 0 || l.Hour.Left != 1000 || !l.Hour.Resets.After(now) || l.Hour.Resets.After(now.Add(time.Hour)) {
		t.Errorf("alice's hour: %+v", l.Hour)
	}
	if l.Day == nil || l.Day.Limit != 5000 || !l.Day.Resets.After(now) || l.Day.Resets.Minute() != 0 || l.Day.Resets.Hour() != 0 {
		t.Errorf("alice's day: %+v", l.Day)
	}
	code, b = ts.as(tn.bob, "GET", "/v1/limits", nil)
	if l := decode[server.Limits](t, code, b, "bob's limits").Limits[0]; l.Hour != nil || l.Day == nil || l.Day.Limit != 10 {
		t.Errorf("bob's limit: %+v", l)
	}
}

func consoleFleet(t *testing.T, ts *testServer, tn *tenants) {
	if code, b := ts.as(tn.bob, "GET", "/v1/fleet", nil); code != 403 {
		t.Errorf("bob's GET /v1/fleet: %d %s, want 403", code, b)
	} else if c, r := reasonOf(t, b); c != "refused" || r != "forbidden" {
		t.Errorf("bob's GET /v1/fleet: %s %s", c, r)
	}
	code, b := ts.as(tn.admin, "GET", "/v1/fleet", nil)
	f := decode[server.Fleet](t, code, b, "the operator's fleet")
	if !f.Fleet || f.Replica != "r1" || f.HeartbeatMS != time.Hour.Milliseconds() || len(f.Replicas) != 3 {
		t.Fatalf("fleet: %s", b)
	}
	gone, r1, r2 := f.Replicas[0], f.Replicas[1], f.Replicas[2]
	if gone.ID != "gone" || gone.Heartbeat != nil || !gone.Lost || gone.Turns != 1 || gone.Self {
		t.Errorf("the replica that never beat: %+v", gone)
	}
	if r1.ID != "r1" || !r1.Self || r1.Heartbeat == nil || r1.Lost {
		t.Errorf("this replica: %+v", r1)
	}
	if r2.ID != "r2" || r2.Self || r2.Heartbeat == nil || r2.Lost || r2.Turns != 0 {
		t.Errorf("the other live replica: %+v", r2)
	}
}

func consoleGC(t *testing.T, ts *testServer, tn *tenants, dead string) {
	for _, m := range []string{"GET", "POST"} {
		if code, b := ts.as(tn.alice, m, "/v1/gc", nil); code != 403 {
			t.Errorf("alice's %s /v1/gc: %d %s, want 403", m, code, b)
		}
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a client's gc removed something: %v", err)
	}
	code, b := ts.as(tn.admin, "GET", "/v1/gc", nil)
	g := decode[server.GC](t, code, b, "GET /v1/gc")
	if g.Last != nil || !g.Pending.DryRun || len(g.Pending.Sandboxes) != 1 {
		t.Fatalf("GET /v1/gc before a run: %s", b)
	}
	if sb := g.Pending.Sandboxes[0]; sb.Sandbox != "local" || sb.Error != "" || len(sb.Orphans) != 1 || sb.Orphans[0].Name != dead || sb.Orphans[0].Removed {
		t.Errorf("the dry run: %s", b)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("the dry run removed the home: %v", err)
	}
	code, b = ts.as(tn.admin, "POST", "/v1/gc", nil)
	run := decode[server.GCRun](t, code, b, "POST /v1/gc")
	if run.DryRun || len(run.Sandboxes[0].Orphans) != 1 || !run.Sandboxes[0].Orphans[0].Removed {
		t.Errorf("the run: %s", b)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead home after the run: %v", err)
	}
	code, b = ts.as(tn.admin, "GET", "/v1/gc", nil)
	if g := decode[server.GC](t, code, b, "GET /v1/gc after"); g.Last == nil || !g.Last.Time.Equal(run.Time) || len(g.Pending.Sandboxes[0].Orphans) != 0 {
		t.Errorf("GET /v1/gc after the run: %s", b)
	}
}

func consoleTurns(t *testing.T, ts *testServer, tn *tenants) {
	if code, b := ts.as(tn.alice, "POST", "/v1/turns", map[string]any{"prompt": "x", "budget": -1}); code != 400 {
		t.Errorf("a negative budget: %d %s", code, b)
	}
	prompt := "#slow=40 the secret " + canary
	code, b := ts.as(tn.alice, "POST", "/v1/turns", map[string]any{"prompt": prompt, "model": "echo-large", "budget": 100000, "max_tokens": 50000})
	if code != 202 {
		t.Fatalf("alice's turn: %d %s", code, b)
	}
	st := decode[server.TurnStatus](t, 200, b, "alice's turn")
	code, b = ts.as(tn.alice, "GET", "/v1/turns/"+st.ID, nil)
	run := decode[server.TurnStatus](t, code, b, "the running turn")
	if run.Replica != "r1" || run.Model != "echo-large" || !strings.HasPrefix(run.Prompt, "#slow=40 the secret ") || strings.Contains(run.Prompt, canary) {
		t.Errorf("the running turn: %s", b)
	}
	old := ts.token
	ts.token = tn.alice
	res := ts.wait(st.ID)
	ts.token = old
	code, b = ts.as(tn.alice, "GET", "/v1/turns/"+st.ID, nil)
	if fin := decode[server.TurnStatus](t, code, b, "the finished turn"); fin.Usage == nil || fin.Usage.OutputTokens == 0 {
		t.Errorf("the finished turn's tokens: %s", b)
	}
	conv, _ := res["conversation"].(string)
	code, b = ts.as(tn.alice, "GET", "/v1/conversations/"+conv+"/usage", nil)
	if u := decode[server.Usage](t, code, b, "usage"); u.Budget != 100000 {
		t.Errorf("the budget asked for is not the conversation's: %s", b)
	}
	code, b = ts.as(tn.alice, "GET", "/v1/conversations/"+conv+"/history", nil)
	h := decode[server.History](t, code, b, "alice's history")
	if h.Source != "history" || len(h.Exchanges) != 1 || !strings.HasPrefix(h.Exchanges[0].Prompt, "#slow=40 the secret ") || !strings.Contains(h.Exchanges[0].Answer, "(turn 1)") {
		t.Errorf("alice's history: %s", b)
	}
	if code, b := ts.as(tn.bob, "GET", "/v1/conversations/"+conv+"/history", nil); code != 404 {
		t.Errorf("bob's GET of alice's history: %d %s, want 404", code, b)
	}
	if code, b := ts.as(tn.admin, "GET", "/v1/conversations/"+conv+"/history", nil); code != 200 {
		t.Errorf("the operator's GET of alice's history: %d %s", code, b)
	}
}

// consoleRoutes exercises the console's routes against the OpenAPI
// document with TestAPI's client token.
func consoleRoutes(t *testing.T, ts *testServer, conv string) {
	if code, b, _ := ts.do("GET", "/v1/limits", nil); code != 200 || string(b) != "{\"limits\":[]}\n" {
		t.Errorf("GET /v1/limits without a limit: %d %s", code, b)
	}
	for _, r := range []string{"GET /v1/fleet", "GET /v1/gc", "POST /v1/gc"} {
		m, p, _ := strings.Cut(r, " ")
		if code, b, _ := ts.do(m, p, nil); code != 403 {
			t.Errorf("%s with a client token: %d %s, want 403", r, code, b)
		}
	}
	if code, b, _ := ts.do("GET", "/v1/conversations/"+conv+"/history", nil); code != 200 || !strings.Contains(string(b), `"source":"history"`) {
		t.Errorf("GET history: %d %s", code, b)
	}
	if code, b, _ := ts.do("GET", "/v1/conversations/cnope/history", nil); code != 404 {
		t.Errorf("GET history of an unknown conversation: %d %s", code, b)
	}
}
