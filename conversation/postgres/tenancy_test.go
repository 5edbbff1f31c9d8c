package postgres_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/pgtest"
	_ "github.com/outposthq/outpost/providers/local" // registers "local"
	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/turnstore"
)

// TestTenancyOnPostgres: a conversation's owner and a turn's client are
// stored in PostgreSQL (the conversation's metadata, the turn's column of
// migration 0004), and outpost serve on that database shows them only to
// their owner and to an operator: bob gets 404 on alice's (issue #43).
func TestTenancyOnPostgres(t *testing.T) {
	ctx := context.Background()
	st := open(t, pgtest.NewDB(t))
	conv := conversation.NewID()
	if err := st.Put(ctx, conversation.Meta{ID: conv, Agent: "echo", Owner: "token:alice"}, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Meta(ctx, conv); err != nil || m.Owner != "token:alice" {
		t.Fatalf("stored owner %q, %v", m.Owner, err)
	}
	turn := "t" + strings.Repeat("0a", 12)
	if err := st.Turns().Create(ctx, turnstore.Turn{ID: turn, Owner: "gone", Client: "token:alice", Agent: "echo", Sandbox: "local", State: turnstore.StateFinished, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Turns().Get(ctx, turn); err != nil || rec.Client != "token:alice" {
		t.Fatalf("stored client %q, %v", rec.Client, err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	tok := map[string]string{}
	for _, n := range []string{"alice", "bob", "admin"} {
		var fields []string
		if n == "admin" {
			fields = []string{"operator"}
		}
		s, err := server.AddToken(path, n, fields...)
		if err != nil {
			t.Fatal(err)
		}
		tok[n] = s
	}
	tokens, err := server.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(&server.Options{Store: st, Turns: st.Turns(), Replica: "r1", Heartbeat: time.Second, Workdir: dir, Environ: []string{}, Tokens: tokens, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Shutdown(ctx)
	})
	get := func(who, method, path string) int {
		req, _ := http.NewRequest(method, hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok[who])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		who, method, path string
		want              int
	}{
		{"bob", "GET", "/v1/conversations/" + conv, 404},
		{"bob", "GET", "/v1/conversations/" + conv + "/export", 404},
		{"bob", "DELETE", "/v1/conversations/" + conv, 404},
		{"bob", "GET", "/v1/turns/" + turn, 404},
		{"bob", "GET", "/v1/turns/" + turn + "/events", 404},
		{"alice", "GET", "/v1/conversations/" + conv, 200},
		{"alice", "GET", "/v1/turns/" + turn, 200},
		{"admin", "GET", "/v1/conversations/" + conv, 200},
		{"admin", "GET", "/v1/turns/" + turn, 200},
	} {
		if got := get(c.who, c.method, c.path); got != c.want {
			t.Errorf("%s %s %s: %d, want %d", c.who, c.method, c.path, got, c.want)
		}
	}
}
