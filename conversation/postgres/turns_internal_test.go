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
// submitted and when it starts; each is one statement, one round trip to
// the database (it was a transaction of four: BEGIN, the write, the
// note, COMMIT), and the replicas listening are told of both.
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
	} {
		op, f := w.op, w.f
		before := tr.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if n := tr.n.Load() - before; n != 1 {
			t.Errorf("%s: %d statements, want 1", op, n)
		}
		for got := <-notes; got != "t1"; got = <-notes {
		}
	}
	got, err := ts.Get(ctx, "t1")
	if err != nil || got.State != turnstore.StateRunning || got.Started.IsZero() {
		t.Errorf("the turn after its start: %+v, %v", got, err)
	}
}
