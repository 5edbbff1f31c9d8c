package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/turnstore"
)

// failingCreate is a Memory store whose Create fails, as when the
// database went down between the replica's last write and a new turn's;
// before failing, it watches the server for the turn running (ran).
type failingCreate struct {
	*turnstore.Memory
	running func() bool
	ran     bool
}

func (f *failingCreate) Create(ctx context.Context, t turnstore.Turn) error {
	// The bug this guards against showed in a few milliseconds: the
	// turn took its slot while its record was being written. Two
	// seconds of watching cost no CPU.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if f.running() {
			f.ran = true
			break
		}
	}
	return errors.New("connection refused")
}

// TestFleetRefusedTurnNeverRuns: a turn whose record the turn store
// could not take is refused with 503 store_unavailable, and never runs.
// It used to run while its record was written, and go on after the
// refusal: the chaos run (docs/scale.md) saw a turn its client was told
// to retry answer and store its conversation, so the retry ran it twice.
func TestFleetRefusedTurnNeverRuns(t *testing.T) {
	st := &failingCreate{Memory: turnstore.NewMemory()}
	ts := fleetOf(t, st, "a")[0]
	st.running = func() bool {
		req, _ := http.NewRequest("GET", ts.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+ts.token)
		resp, err := ts.client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\noutpost_turns_running 1\n")
	}
	code, b, _ := ts.do("POST", "/v1/turns", map[string]any{"prompt": "refused"})
	if code != http.StatusServiceUnavailable || !strings.Contains(string(b), `"store_unavailable"`) {
		t.Fatalf("POST /v1/turns with the turn store failing: %d %s", code, b)
	}
	if st.ran {
		t.Error("the turn ran while its record was being written, though it was refused")
	}
	if code, b, _ := ts.do("GET", "/v1/conversations", nil); code != 200 || strings.Contains(string(b), `"id"`) {
		t.Errorf("conversations after the refused turn: %d %s, want none", code, b)
	}
}

// failingFinish is a Memory store that refuses a turn's first results,
// as a database restarting does, and counts the heartbeats.
type failingFinish struct {
	*turnstore.Memory
	refuse atomic.Int64 // Finish calls still to fail
	beats  atomic.Int64
}

func (f *failingFinish) Finish(ctx context.Context, id string, result turnstore.Event, at time.Time) (bool, error) {
	if f.refuse.Add(-1) >= 0 {
		return false, errors.New("the database system is starting up")
	}
	return f.Memory.Finish(ctx, id, result, at)
}

func (f *failingFinish) Beat(ctx context.Context, replica string) error {
	f.beats.Add(1)
	return f.Memory.Beat(ctx, replica)
}

// TestFleetResultWrittenAfterOutage: a result the turn store refused
// (more times than the writer tries) is written once the store takes
// writes again, so the turn ends in the store and a client following it
// through another replica gets its result. It was dropped: the chaos
// run's turns that ended during a PostgreSQL restart stayed running in
// the store for good.
func TestFleetResultWrittenAfterOutage(t *testing.T) {
	st := &failingFinish{Memory: turnstore.NewMemory()}
	st.refuse.Store(5)
	// Heartbeats of 1 s: at fleetOf's 50 ms, a loaded machine made A look
	// lost to B, which then ended the turn itself.
	var f []*testServer
	for _, n := range []string{"a", "b"} {
		f = append(f, start(t, func(o *server.Options) { o.Turns, o.Replica, o.Heartbeat = st, n, time.Second }))
	}
	a, b := f[0], f[1]
	id := a.startTurn(map[string]any{"prompt": "through a restart"}).ID
	if res := a.wait(id); res["error"] != nil {
		t.Fatalf("the turn: %v", res["error"])
	}
	for from := st.beats.Load(); ; {
		rec, err := st.Memory.Get(context.Background(), id)
		if err == nil && rec.State == turnstore.StateFinished {
			break
		}
		if st.beats.Load()-from > 20 { // 10 heartbeats of each replica
			t.Fatalf("the turn is %s in the store 10 heartbeats after its result (%v)", rec.State, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res := b.wait(id); res["error"] != nil || !strings.Contains(fmt.Sprint(res["text"]), "through a restart") {
		t.Errorf("the result through B: %v", res)
	}
}

// slowFinish is a Memory store whose Finish takes a while, as a loaded
// database's does.
type slowFinish struct {
	*turnstore.Memory
	delay time.Duration
}

func (f *slowFinish) Finish(ctx context.Context, id string, result turnstore.Event, at time.Time) (bool, error) {
	time.Sleep(f.delay)
	return f.Memory.Finish(ctx, id, result, at)
}

// TestFleetResultStoredBeforeSeen: once a client has a turn's result from
// one replica, the turn store holds it finished, so another replica (or
// a reader of the store) never shows it running. The result was written
// after the clients had it: the fresh-clone chaos run read a turn as
// running in the store just after its user saw it end.
func TestFleetResultStoredBeforeSeen(t *testing.T) {
	st := &slowFinish{Memory: turnstore.NewMemory(), delay: 300 * time.Millisecond}
	a := start(t, func(o *server.Options) { o.Turns, o.Replica = st, "a" })
	id := a.startTurn(map[string]any{"prompt": "read your writes"}).ID
	if res := a.wait(id); res["error"] != nil {
		t.Fatalf("the turn: %v", res["error"])
	}
	rec, err := st.Memory.Get(context.Background(), id)
	if err != nil || rec.State != turnstore.StateFinished {
		t.Fatalf("the store holds the turn %s (%v) once its client has the result", rec.State, err)
	}
}
