package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/internal/pgtest"
)

// fleetBeat is the replicas' heartbeat in these tests: a replica silent
// for 3 of them is lost. 200 ms made a live replica look lost on a loaded
// machine (its beats timed out while the other's reap went through, and
// TestFleetTwoReplicas' turns ended replica_lost).
const fleetBeat = "1s"

// replica starts one `outpost serve` of a fleet on the PostgreSQL store.
func replica(t *testing.T, url, name string) *served {
	t.Helper()
	return startServe(t, "", "", "--store", url, "--replica", name, "--heartbeat", fleetBeat)
}

// resultOf follows a turn to its result line through s.
func resultOf(t *testing.T, s *served, id string) map[string]any {
	t.Helper()
	items, err := s.follow(id, 0, nil)
	if err != nil || len(items) == 0 || items[len(items)-1].typ != "result" {
		t.Fatalf("turn %s: %v, %d items", id, err, len(items))
	}
	n := 0
	for _, it := range items {
		if it.typ == "result" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("turn %s: %d result lines", id, n)
	}
	return items[len(items)-1].data
}

func errorOf(res map[string]any) (string, map[string]any) {
	e, _ := res["error"].(map[string]any)
	if e == nil {
		return "", nil
	}
	d, _ := e["details"].(map[string]any)
	return fmt.Sprint(e["code"]), d
}

// TestFleetTwoReplicas runs two real `outpost serve` processes on one
// real PostgreSQL database: a turn started on A is followed, steered and
// cancelled through B; 40 turns started over both and each followed
// through the other end exactly once each.
func TestFleetTwoReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	a, b := replica(t, url, "a"), replica(t, url, "b")

	id, err := a.start(map[string]any{"prompt": "#slow=3000"})
	if err != nil {
		t.Fatal(err)
	}
	b.follow(id, 0, func(it streamed) bool { return it.typ == "message" })
	if code, body := b.do("POST", "/v1/turns/"+id+"/messages", map[string]any{"text": "wrap up"}); code != 202 {
		t.Fatalf("steer through B: %d %s", code, body)
	}
	if res := resultOf(t, b, id); !strings.Contains(fmt.Sprint(res["text"]), "steered: wrap up") {
		t.Errorf("the turn steered through B answered %v", res["text"])
	}
	id, err = a.start(map[string]any{"prompt": "#slow=60000"})
	if err != nil {
		t.Fatal(err)
	}
	b.follow(id, 0, func(it streamed) bool { return it.typ == "message" })
	if code, body := b.do("POST", "/v1/turns/"+id+"/cancel", nil); code != 202 {
		t.Fatalf("cancel through B: %d %s", code, body)
	}
	if code, d := errorOf(resultOf(t, b, id)); code != "cancelled" || d["cancelled_by"] != "client" {
		t.Errorf("the turn cancelled through B ended with %s %v", code, d)
	}

	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			on, through := a, b
			if i%2 == 1 {
				on, through = b, a
			}
			id, err := on.start(map[string]any{"prompt": fmt.Sprintf("turn %d #tool", i)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = id
			res := resultOf(t, through, id)
			if code, _ := errorOf(res); code != "" || !strings.Contains(fmt.Sprint(res["text"]), fmt.Sprintf("turn %d", i)) {
				t.Errorf("turn %d (%s) through the other replica: %v", i, id, res)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Errorf("turn id %q missing or doubled", id)
		}
		seen[id] = true
	}
	if got := countTurns(t, url); got != n+2 {
		t.Errorf("the store holds %d turns, want %d", got, n+2)
	}
}

func countTurns(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT id) FROM outpost_turns WHERE state = 'finished'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFleetReplicaKilled kills replica A (SIGKILL) during 5 running turns,
// one of them continuing a stored conversation: as seen from B each ends
// with code sandbox and details.replica_lost; the conversation stays at
// its stored revision and resumes on B; a replica restarted under A's
// name serves A's turn ids.
func TestFleetReplicaKilled(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	a, b := replica(t, url, "a"), replica(t, url, "b")
	first, err := a.start(map[string]any{"prompt": "remember this"})
	if err != nil {
		t.Fatal(err)
	}
	conv := fmt.Sprint(resultOf(t, a, first)["conversation"])
	var ids []string
	for i := range 5 {
		req := map[string]any{"prompt": fmt.Sprintf("hang %d #hang", i)}
		if i == 0 {
			req["resume"] = conv
		}
		id, err := a.start(req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids { // each runs: B has seen an event of it
		if _, err := b.follow(id, 0, func(streamed) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	a.cmd.Process.Kill()
	<-a.exited
	for _, id := range ids {
		res := resultOf(t, b, id)
		if code, d := errorOf(res); code != "sandbox" || d["replica_lost"] != "a" {
			t.Errorf("turn %s after A was killed: %v", id, res["error"])
		}
	}
	t.Logf("the 5 turns of the killed replica ended, as seen from B, %v after the kill (heartbeat %s)", time.Since(killed).Round(time.Millisecond), fleetBeat)

	code, body := b.do("GET", "/v1/conversations/"+conv, nil)
	var m struct{ Turns int }
	json.Unmarshal(body, &m)
	if code != 200 || m.Turns != 1 {
		t.Errorf("the conversation after the loss: %d %s, want its 1 stored turn", code, body)
	}
	var res map[string]any
	for range 50 { // the killed process's hold goes with its connections
		id, err := b.start(map[string]any{"prompt": "and now?", "resume": conv})
		if err != nil {
			t.Fatal(err)
		}
		if res = resultOf(t, b, id); res["error"] == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if res["error"] != nil || fmt.Sprint(res["conversation"]) != conv {
		t.Errorf("resuming on B: %v", res)
	}

	a2 := replica(t, url, "a")
	if code, _ := errorOf(resultOf(t, a2, ids[0])); code != "sandbox" {
		t.Errorf("the restarted A on a lost turn: %s", code)
	}
	if res := resultOf(t, a2, first); res["error"] != nil {
		t.Errorf("the restarted A on A's first turn: %v", res)
	}
}

// TestFleetDrain: SIGTERM to replica A (a rolling restart) while three
// turns run there: A refuses new turns, and every turn, followed through
// B, ends with its answer.
func TestFleetDrain(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	a := startServe(t, "", "", "--store", url, "--replica", "a", "--heartbeat", fleetBeat, "--grace", "2m")
	b := replica(t, url, "b")
	var ids []string
	for i := range 3 {
		id, err := a.start(map[string]any{"prompt": fmt.Sprintf("drain %d #slow=40", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		b.follow(id, 0, func(it streamed) bool { return it.typ == "message" })
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	for {
		code, _ := a.do("GET", "/healthz", nil)
		if code == 503 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := a.start(map[string]any{"prompt": "too late"}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a new turn on the draining replica: %v, want 503", err)
	}
	for i, id := range ids {
		res := resultOf(t, b, id)
		if code, _ := errorOf(res); code != "" || !strings.Contains(fmt.Sprint(res["text"]), fmt.Sprintf("drain %d", i)) {
			t.Errorf("turn %s of the draining replica: %v", id, res)
		}
	}
	<-a.exited
}
