package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/conversation/storetest"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/turnstore"
	"github.com/outposthq/outpost/turnstore/turnstoretest"
)

func TestMain(m *testing.M) {
	storetest.Main(func(url string) (conversation.Store, error) {
		return postgres.Open(context.Background(), url, nil)
	})
	os.Exit(pgtest.Run(m))
}

func open(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	urls := map[conversation.Store]string{}
	storetest.RunConformanceTests(t, func(t *testing.T) conversation.Store {
		url := pgtest.NewDB(t)
		s := open(t, url)
		urls[s] = url
		return s
	}, &storetest.Options{Spec: func(s conversation.Store) string { return urls[s] }})
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	s := open(t, url)
	if err := s.Put(ctx, conversation.Meta{ID: "c01keep", Agent: "echo"}, nil); err != nil {
		t.Fatal(err)
	}
	// Opening again is a no-op: every migration is applied once.
	open(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outpost_schema`).Scan(&n); err != nil || n != len(postgres.Migrations()) {
		t.Fatalf("outpost_schema rows = %d, %v; want %d", n, err, len(postgres.Migrations()))
	}
	future := postgres.Migrations()[len(postgres.Migrations())-1] + 1
	if _, err := conn.Exec(ctx, `INSERT INTO outpost_schema (version) VALUES ($1)`, future); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, url, nil)
	if !errors.Is(err, postgres.ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprint(future)) {
		t.Fatalf("Open of a newer schema: %v, want ErrNewerSchema naming version %d", err, future)
	}
	// Nothing was touched: the conversation is still there.
	if _, err := s.Meta(ctx, "c01keep"); err != nil {
		t.Errorf("after the refusal: %v", err)
	}
}

func TestBigFilesInParts(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	s := open(t, url)
	big := bytes.Repeat([]byte("0123456789abcdef"), (2*postgres.PartSize+12345)/16)
	files := []conversation.File{
		{Path: "a", Data: big},
		{Path: "empty"},
		{Path: "exact", Data: big[:postgres.PartSize]},
	}
	if err := s.Put(ctx, conversation.Meta{ID: "c01big"}, files); err != nil {
		t.Fatal(err)
	}
	_, got, err := s.Get(ctx, "c01big")
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if got[i].Path != files[i].Path || !bytes.Equal(got[i].Data, files[i].Data) {
			t.Errorf("file %d differs", i)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var parts int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outpost_parts WHERE conversation = 'c01big'`).Scan(&parts); err != nil || parts != 4 {
		t.Errorf("parts = %d, %v; want 3 + 1", parts, err)
	}
	// Damage is reported, never returned as data.
	if _, err := conn.Exec(ctx, `UPDATE outpost_parts SET data = 'x' || data WHERE conversation = 'c01big' AND idx = 0 AND part = 1`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "c01big"); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Get of a damaged file: %v, want ErrInvalid", err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outpost_parts WHERE conversation = 'c01big' AND idx = 0 AND part = 1`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "c01big"); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Get of a file missing a part: %v, want ErrInvalid", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := postgres.Open(ctx, "postgres://user:hunter2secret@/db?host=/nonexistent-outpost-dir&connect_timeout=2", nil); err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("Open of an unreachable server: %v (must fail without the password)", err)
	}
	if _, err := postgres.Open(ctx, "postgres://%zz", nil); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Open of a malformed URL: %v, want ErrInvalid", err)
	}
}

func TestTurnsConformance(t *testing.T) {
	turnstoretest.Run(t, func(t *testing.T) turnstore.Store { return open(t, pgtest.NewDB(t)).Turns() })
}

// TestHoldFreedWhileLooking: a lock whose holder has no row yet (or no
// longer) and that is freed while Hold looks for the row is taken, not
// reported busy without a holder (a full run saw that busy error when a
// resume ended just as another began).
func TestHoldFreedWhileLooking(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	s := open(t, url)
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	id := conversation.NewID()
	key := postgres.LockKey(id)
	if _, err := raw.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	type held struct {
		h   conversation.Hold
		err error
	}
	done := make(chan held, 1)
	go func() {
		h, err := s.Hold(ctx, id, conversation.Owner{Host: "test", PID: 1})
		done <- held{h, err}
	}()
	// Once Hold has failed to take the lock and looked for the holder's
	// row, the lock is freed.
	for looked := false; !looked; {
		select {
		case r := <-done:
			t.Fatalf("Hold returned before it looked for a holder: %v", r.err)
		default:
		}
		err := raw.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND query LIKE '%FROM outpost_holds h%'`).Scan(&looked)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("a hold freed while Hold looked for its holder: %v", r.err)
	}
	if err := r.h.Release(); err != nil {
		t.Fatal(err)
	}
}
