package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/turnstore"
)

// fleetOf starts n servers sharing one in-process turn store.
func fleetOf(t *testing.T, st turnstore.Store, names ...string) []*testServer {
	var out []*testServer
	for _, n := range names {
		out = append(out, start(t, func(o *server.Options) {
			o.Turns, o.Replica, o.Heartbeat = st, n, 50*time.Millisecond
		}))
	}
	return out
}

func raws(items []sseItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, fmt.Sprintf("%d %s", it.seq, it.raw))
	}
	return out
}

// TestFleetThroughAnotherReplica: a turn started on A is read, followed,
// steered and cancelled through B, which never held it; B's stream is
// A's, event for event.
func TestFleetThroughAnotherReplica(t *testing.T) {
	f := fleetOf(t, turnstore.NewMemory(), "a", "b")
	a, b := f[0], f[1]

	steered := a.startTurn(map[string]any{"prompt": "#slow=3000"})
	code, body, _ := b.do("GET", "/v1/turns/"+steered.ID, nil)
	var st server.TurnStatus
	if json.Unmarshal(body, &st); code != 200 || st.ID != steered.ID || st.Agent != "echo" || st.State == server.StateFinished {
		t.Fatalf("GET through B: %d %s", code, body)
	}
	b.events(steered.ID, 0, func(it sseItem) bool { return it.data["type"] == "message" })
	if code, body, _ := b.do("POST", "/v1/turns/"+steered.ID+"/messages", map[string]any{"text": "wrap up"}); code != 202 {
		t.Fatalf("steer through B: %d %s", code, body)
	}
	res := b.wait(steered.ID)
	if !strings.Contains(fmt.Sprint(res["text"]), "steered: wrap up") {
		t.Errorf("the turn steered through B answered %v", res["text"])
	}
	if d := cmp.Diff(raws(a.events(steered.ID, 0, nil)), raws(b.events(steered.ID, 0, nil))); d != "" {
		t.Errorf("B's stream differs from A's (-A +B):\n%s", d)
	}
	if got := b.events(steered.ID, 2, nil); len(got) == 0 || got[0].seq != 3 {
		t.Errorf("B's stream after Last-Event-ID 2 starts at %v", raws(got))
	}
	if code, body, _ := b.do("POST", "/v1/turns/"+steered.ID+"/messages", map[string]any{"text": "more"}); code != 409 {
		t.Errorf("steer of a finished turn through B: %d %s, want 409", code, body)
	}

	slow := a.startTurn(map[string]any{"prompt": "#slow=30000"})
	b.events(slow.ID, 0, func(it sseItem) bool { return it.data["type"] == "message" })
	if code, body, _ := b.do("POST", "/v1/turns/"+slow.ID+"/cancel", nil); code != 202 {
		t.Fatalf("cancel through B: %d %s", code, body)
	}
	r := b.wait(slow.ID)
	if e, _ := r["error"].(map[string]any); e["code"] != "cancelled" || e["details"].(map[string]any)["cancelled_by"] != "client" {
		t.Errorf("the turn cancelled through B: %v", r)
	}
	if code, body, _ := b.do("POST", "/v1/turns/"+slow.ID+"/cancel", nil); code != 200 || !strings.Contains(string(body), `"finished"`) {
		t.Errorf("cancel of a finished turn through B: %d %s, want 200 finished", code, body)
	}
	if code, _, _ := b.do("GET", "/v1/turns/t000000000000000000000000", nil); code != 404 {
		t.Errorf("GET of an unknown turn through B: %d, want 404", code)
	}
}

// TestFleetLostReplica: the unfinished turns of a replica that stopped
// beating (here one that never runs: its records are written directly)
// end, as seen from B, with code sandbox and details.replica_lost; its
// finished turn is left as it was.
func TestFleetLostReplica(t *testing.T) {
	st := turnstore.NewMemory()
	ctx := context.Background()
	if err := st.Beat(ctx, "ghost"); err != nil {
		t.Fatal(err)
	}
	ids := []string{"t00000000000000000000000a", "t00000000000000000000000b"}
	for _, id := range ids {
		st.Create(ctx, turnstore.Turn{ID: id, Owner: "ghost", Client: "token:test", Agent: "echo", Sandbox: "local", State: turnstore.StateRunning, Created: time.Now()})
		st.Append(ctx, id, []turnstore.Event{{Seq: 1, Data: []byte(`{"type":"message","agent":"echo","text":"half","time":"2026-01-02T03:04:05Z"}`)}}, 1<<20)
	}
	b := fleetOf(t, st, "b")[0]
	for _, id := range ids {
		items := b.events(id, 0, nil)
		if len(items) != 2 || items[0].data["text"] != "half" {
			t.Fatalf("turn %s through B: %v", id, raws(items))
		}
		e, _ := items[1].data["error"].(map[string]any)
		if items[1].data["type"] != "result" || e["code"] != "sandbox" || e["details"].(map[string]any)["replica_lost"] != "ghost" {
			t.Errorf("turn %s of the lost replica ended with %s", id, items[1].raw)
		}
		// A client that saw more of the turn live from the lost replica
		// than it wrote gets the result after what it saw, not nothing.
		seen := b.events(id, 3, nil)
		if len(seen) != 1 || seen[0].seq <= 3 || seen[0].data["type"] != "result" {
			t.Fatalf("turn %s through B after Last-Event-ID 3 (beyond the stored 2): %v", id, raws(seen))
		}
		if again := b.events(id, seen[0].seq, nil); len(again) != 0 {
			t.Errorf("turn %s through B after its result: %v", id, raws(again))
		}
		code, body, _ := b.do("GET", "/v1/turns/"+id, nil)
		if code != 200 || !strings.Contains(string(body), `"replica_lost":"ghost"`) || !strings.Contains(string(body), `"state":"finished"`) {
			t.Errorf("GET %s through B: %d %s", id, code, body)
		}
	}
}

// TestFleetRestart: a turn's id outlives the replica that ran it: a new
// replica on the same store answers for it after the first shut down.
func TestFleetRestart(t *testing.T) {
	st := turnstore.NewMemory()
	a := fleetOf(t, st, "a")[0]
	id := a.startTurn(map[string]any{"prompt": "before the restart"}).ID
	want := raws(a.events(id, 0, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c := fleetOf(t, st, "a-restarted")[0]
	if d := cmp.Diff(want, raws(c.events(id, 0, nil))); d != "" {
		t.Errorf("the restarted replica's replay (-before +after):\n%s", d)
	}
	code, body, _ := c.do("GET", "/v1/turns/"+id, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"state":"finished"`) {
		t.Errorf("GET after the restart: %d %s", code, body)
	}
}

// TestFleetSameNameRestarted: a replica started under the name of one
// that ran before ends that one's unfinished turns at once, though its
// heartbeat is fresh (they cannot be running: the name is this process's).
func TestFleetSameNameRestarted(t *testing.T) {
	st := turnstore.NewMemory()
	ctx := context.Background()
	st.Beat(ctx, "b")
	id := "t0000000000000000000000cc"
	st.Create(ctx, turnstore.Turn{ID: id, Owner: "b", Client: "token:test", Agent: "echo", Sandbox: "local", State: turnstore.StateRunning, Created: time.Now()})
	b := start(t, func(o *server.Options) { o.Turns, o.Replica, o.Heartbeat = st, "b", time.Hour })
	code, body, _ := b.do("GET", "/v1/turns/"+id, nil)
	if code != 200 || !strings.Contains(string(body), `"replica_lost":"b"`) {
		t.Errorf("the previous b's turn: %d %s, want finished with replica_lost", code, body)
	}
}

// TestFleetMemoryPerTurn measures what a running turn costs a replica's
// process (docs/serve.md, "Limits per replica"): the heap and goroutines
// of 32 turns running at once (echo #hang on the local sandbox: the
// agent's own process is outside the measure), logged for the docs and
// held to the target (#46: 64 KiB of live objects a running
// turn; the heap in use, fragmentation included, under 128 KiB): it was
// 174 KiB live, 185-196 KiB in use, while each of a turn's two output
// streams held a 64 KiB buffer and its redactor an 8 KiB filter.
func TestFleetMemoryPerTurn(t *testing.T) {
	const n = 32
	ts := start(t, func(o *server.Options) {
		o.Turns, o.Replica, o.Heartbeat = turnstore.NewMemory(), "m", time.Hour
		o.MaxConcurrent, o.PoolSize = n, -1
	})
	ts.wait(ts.startTurn(map[string]any{"prompt": "warm up"}).ID)
	before := heap()
	goroutines := runtime.NumGoroutine()
	var ids []string
	for i := range n {
		ids = append(ids, ts.startTurn(map[string]any{"prompt": fmt.Sprintf("hang %d #hang", i)}).ID)
	}
	for _, id := range ids {
		ts.events(id, 0, func(sseItem) bool { return true })
	}
	after := heap()
	per, live := (after.inuse-before.inuse)/n, (after.live-before.live)/n
	perG := (runtime.NumGoroutine() - goroutines) / n
	t.Logf("one running turn: %d KiB of heap in use, %d KiB of it live objects, %d goroutines (%d turns)", per>>10, live>>10, perG, n)
	for _, id := range ids {
		ts.do("POST", "/v1/turns/"+id+"/cancel", nil)
	}
	for _, id := range ids {
		ts.wait(id)
	}
	if per > 128<<10 || live > 64<<10 {
		t.Errorf("one running turn takes %d KiB of heap, %d KiB live, want under 128 and 64 KiB", per>>10, live>>10)
	}
}

// heap is the heap in use (spans, HeapInuse) and its live objects
// (HeapAlloc) after a collection.
func heap() (h struct{ inuse, live int64 }) {
	runtime.GC()
	runtime.GC() // the pools' buffers: kept one collection, freed at the next
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.inuse, h.live = int64(m.HeapInuse), int64(m.HeapAlloc)
	return h
}

// unreachable is a Memory store whose heartbeats fail while down, as when
// the database is out of reach of every replica.
type unreachable struct {
	*turnstore.Memory
	down   atomic.Bool
	failed atomic.Int64
	enough chan struct{} // closed after 10 failed heartbeats
}

func (u *unreachable) Beat(ctx context.Context, replica string) error {
	if u.down.Load() {
		if u.failed.Add(1) == 10 {
			close(u.enough)
		}
		return errors.New("unreachable")
	}
	return u.Memory.Beat(ctx, replica)
}

// TestFleetOutageLosesNoLiveReplica: when no replica could beat for many
// heartbeats (the database was out of reach), none takes the others for
// lost once it is back: a turn running on A all along ends with its
// answer.
func TestFleetOutageLosesNoLiveReplica(t *testing.T) {
	st := &unreachable{Memory: turnstore.NewMemory(), enough: make(chan struct{})}
	f := fleetOf(t, st, "a", "b")
	a, b := f[0], f[1]
	id := a.startTurn(map[string]any{"prompt": "through the outage #slow=60"}).ID
	b.events(id, 0, func(it sseItem) bool { return it.data["type"] == "message" })
	st.down.Store(true)
	<-st.enough // both replicas silent for about 5 heartbeats
	st.down.Store(false)
	res := b.wait(id)
	if res["error"] != nil {
		t.Errorf("the turn that ran through the outage ended with %v", res["error"])
	}
}

// TestFleetStoreDownAtStart: a replica that cannot reach its turn store
// does not start.
func TestFleetStoreDownAtStart(t *testing.T) {
	st := &unreachable{Memory: turnstore.NewMemory(), enough: make(chan struct{})}
	st.down.Store(true)
	_, err := server.New(&server.Options{Turns: st, Workdir: t.TempDir(), PoolSize: -1})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("New with its turn store down: %v", err)
	}
}
