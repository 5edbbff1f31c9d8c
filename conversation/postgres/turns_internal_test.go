package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/turnstore"
)

// statements counts the statements a pool sends (BEGIN and COMMIT too).
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTurnWritesOneStatement: a fleet writes each turn's record when it is
// submitted and when it starts, each one statement, one round trip to
// the database (it was a transaction of four: BEGIN, the write, the
// note, COMMIT); its events and its result are a transaction of four
// (BEGIN, the row locked, the write with its note, COMMIT; it was six),
// and the replicas listening are told of each.
func TestTurnWritesOneStatement(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDB(t)
	st, err := Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	tr := &statements{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ts := turns{&Store{pool: pool}}
	notes := make(chan string, 8)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go st.Turns().Listen(lctx, "other", func(id string) { notes <- id }, func() {})
	// The listener's LISTEN may come after a first note: probe until one
	// is heard.
	probe := func() {
		for {
			if err := st.Turns().Create(ctx, turnstore.Turn{ID: "probe" + time.Now().Format("150405.000000000"), Agent: "echo", State: turnstore.StateQueued, Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-notes:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	probe()
	for _, w := range []struct {
		op string
		f  func() error
	}{
		{"create", func() error {
			return ts.Create(ctx, turnstore.Turn{ID: "t1", Agent: "echo", State: turnstore.StateQueued, Created: time.Now()})
		}},
		{"start", func() error { return ts.Start(ctx, "t1", time.Now()) }},
		{"append", func() error {
			return ts.Append(ctx, "t1", []turnstore.Event{{Seq: 1, Data: []byte(`{"a":1}`)}, {Seq: 2, Data: []byte(`{"b":2}`)}}, 1<<20)
		}},
		{"finish", func() error {
			_, err := ts.Finish(ctx, "t1", turnstore.Event{Seq: 3, Data: []byte(`{"type":"result"}`)}, time.Now())
			return err
		}},
	} {
		op, f, want := w.op, w.f, int64(1)
		if op == "append" || op == "finish" {
			want = 4
		}
		before := tr.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if n := tr.n.Load() - before; n != want {
			t.Errorf("%s: %d statements, want %d", op, n, want)
		}
		for got := <-notes; got != "t1"; got = <-notes {
		}
	}
	got, evs, err := ts.Replay(ctx, "t1", 0, 10)
	if err != nil || got.State != turnstore.StateFinished || got.Started.IsZero() || got.Last != 3 || len(evs) != 3 || string(got.Result) != `{"type":"result"}` {
		t.Errorf("the turn after its result: %+v, %d events, %v", got, len(evs), err)
	}
}
