package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/turnstore"
)

// These benchmarks give the figures of docs/benchmarks.md ("Stores"). Run
// them with the server's fsync on, as the filesystem store fsyncs:
//
//	OUTPOST_PGTEST_FSYNC=on go test -run '^$' -bench . ./conversation/postgres

// oneMiB is a 1 MiB conversation: one JSON-lines session file.
func oneMiB() []conversation.File {
	var b bytes.Buffer
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, `{"role":"assistant","turn":%d,"text":"a line of a conversation, as agents write them, with some text in it"}`+"\n", i)
	}
	return []conversation.File{{Path: ".echo/sessions/bench.jsonl", Mode: 0o600, Data: b.Bytes()[:1<<20]}}
}

func benchStores(b *testing.B, f func(b *testing.B, s conversation.Store)) {
	b.Run("fs", func(b *testing.B) { f(b, conversation.NewFS(filepath.Join(b.TempDir(), "store"))) })
	b.Run("postgres", func(b *testing.B) {
		s := open(b, pgtest.NewDB(b))
		f(b, s)
	})
}

// BenchmarkPut1MiB stores a new revision of a 1 MiB conversation.
func BenchmarkPut1MiB(b *testing.B) {
	benchStores(b, func(b *testing.B, s conversation.Store) {
		ctx := context.Background()
		files := oneMiB()
		m := conversation.Meta{ID: "c01bench", Agent: "echo"}
		b.SetBytes(1 << 20)
		for b.Loop() {
			if err := s.Put(ctx, m, files); err != nil {
				b.Fatal(err)
			}
			m.Revision++
		}
	})
}

// BenchmarkGet1MiB reads a 1 MiB conversation whole.
func BenchmarkGet1MiB(b *testing.B) {
	benchStores(b, func(b *testing.B, s conversation.Store) {
		ctx := context.Background()
		if err := s.Put(ctx, conversation.Meta{ID: "c01bench", Agent: "echo"}, oneMiB()); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(1 << 20)
		for b.Loop() {
			if _, files, err := s.Get(ctx, "c01bench"); err != nil || len(files[0].Data) != 1<<20 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHold takes and releases the hold of an uncontended
// conversation: what every resume pays for it.
func BenchmarkHold(b *testing.B) {
	benchStores(b, func(b *testing.B, s conversation.Store) {
		ctx := context.Background()
		o := conversation.Self("bench")
		for b.Loop() {
			h, err := s.Hold(ctx, "c01bench", o)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Release(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLargeObject1MiB measures the alternative the store did not
// take: the file as a large object (lo_create, write, a row with its oid,
// lo_unlink of the previous one) against the bytea row it uses
// (BenchmarkPut1MiB/postgres, BenchmarkGet1MiB/postgres).
func BenchmarkLargeObject1MiB(b *testing.B) {
	ctx := context.Background()
	url := pgtest.NewDB(b)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_lo (id text PRIMARY KEY, data oid NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	data := oneMiB()[0].Data
	put := func() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		los := tx.LargeObjects()
		oid, err := los.Create(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		obj, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := obj.Write(data); err != nil {
			b.Fatal(err)
		}
		var old *uint32
		tx.QueryRow(ctx, `SELECT data FROM bench_lo WHERE id = 'c01bench' FOR UPDATE`).Scan(&old)
		if _, err := tx.Exec(ctx, `INSERT INTO bench_lo VALUES ('c01bench', $1) ON CONFLICT (id) DO UPDATE SET data = $1`, oid); err != nil {
			b.Fatal(err)
		}
		if old != nil {
			if err := los.Unlink(ctx, *old); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("put", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			put()
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				b.Fatal(err)
			}
			var oid uint32
			if err := tx.QueryRow(ctx, `SELECT data FROM bench_lo WHERE id = 'c01bench'`).Scan(&oid); err != nil {
				b.Fatal(err)
			}
			los := tx.LargeObjects()
			obj, err := los.Open(ctx, oid, pgx.LargeObjectModeRead)
			if err != nil {
				b.Fatal(err)
			}
			got, err := io.ReadAll(obj)
			if err != nil || len(got) != 1<<20 {
				b.Fatal(err)
			}
			tx.Rollback(ctx)
		}
	})
}

// BenchmarkTurnAppend writes a fleet turn's events (docs/serve.md, "A
// fleet"): one Append of 1 and of 16 events of 200 bytes, as the
// replica's writer batches them, and one Replay of 256 events.
func BenchmarkTurnAppend(b *testing.B) {
	ctx := context.Background()
	ts := open(b, pgtest.NewDB(b)).Turns()
	ev := bytes.Repeat([]byte("x"), 200)
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			id := fmt.Sprintf("tbench%d", n)
			if err := ts.Create(ctx, turnstore.Turn{ID: id, Owner: "bench", Agent: "echo", Sandbox: "local", State: turnstore.StateRunning}); err != nil {
				b.Fatal(err)
			}
			seq := int64(0)
			evs := make([]turnstore.Event, n)
			for b.Loop() {
				for i := range evs {
					seq++
					evs[i] = turnstore.Event{Seq: seq, Data: ev}
				}
				if err := ts.Append(ctx, id, evs, 8<<20); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(seq), "µs/event")
		})
	}
	b.Run("replay=256", func(b *testing.B) {
		for b.Loop() {
			if _, evs, err := ts.Replay(ctx, "tbench16", 0, 256); err != nil || len(evs) == 0 {
				b.Fatal(err, len(evs))
			}
		}
	})
}
