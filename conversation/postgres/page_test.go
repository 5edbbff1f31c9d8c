package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/internal/storeops"
)

// TestListPageReadsThePage: with 5,000 conversations stored, a page is
// one store operation (no whole-store List) whose query the planner runs
// on the index of the order of pages, with no sort and no sequential
// scan: it reads the page's rows, not the table's. Before the index and
// ListPage, GET /v1/conversations read every row (storeops "list").
func TestListPageReadsThePage(t *testing.T) {
	url := pgtest.NewDB(t)
	s := open(t, url)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Rows as Put writes them, made by the database: 5,000 Puts would
	// take the suite's time.
	if _, err := conn.Exec(ctx, `INSERT INTO outpost_conversations (id, revision, native, meta, updated, created, owner)
		SELECT 'c' || lpad(i::text, 22, '0'), 1, convert_to('n' || i, 'UTF8'),
			json_build_object('id', 'c' || lpad(i::text, 22, '0'), 'agent', 'echo', 'native', 'n' || i, 'workdir', '/w', 'sandbox', 'local',
				'created', t, 'updated', t, 'turns', 1, 'owner', CASE WHEN i % 2 = 0 THEN 'token:a' ELSE 'token:b' END, 'revision', 1, 'usage', json_build_object(), 'files', json_build_array()),
			t, t, CASE WHEN i % 2 = 0 THEN 'token:a' ELSE 'token:b' END
		FROM generate_series(1, 5000) AS i, LATERAL (SELECT timestamptz '2026-01-01' + i * interval '1 second' AS t) AS ts;
		ANALYZE outpost_conversations`); err != nil {
		t.Fatal(err)
	}
	owner := "token:a"
	first, next, err := s.ListPage(ctx, conversation.PageQuery{Limit: 50})
	if err != nil || len(first) != 50 || next == "" || first[0].ID != "c"+strings.Repeat("0", 18)+"5000" {
		t.Fatalf("first page: %d conversations from %v, next %q, %v", len(first), idOf(first), next, err)
	}
	for _, q := range []conversation.PageQuery{{Limit: 50}, {Limit: 50, After: next}, {Limit: 50, Owner: &owner}, {Limit: 50, Owner: &owner, After: next}} {
		lists, pages := countOf("list"), countOf("list-page")
		page, _, err := conversation.ListPage(ctx, s, q)
		if err != nil || len(page) != 50 {
			t.Fatalf("%+v: %d conversations, %v", q, len(page), err)
		}
		if countOf("list") != lists || countOf("list-page") != pages+1 {
			t.Errorf("%+v: %d lists of the store and %d pages, want 0 and 1", q, countOf("list")-lists, countOf("list-page")-pages)
		}
		plan := explain(t, conn, q)
		if !strings.Contains(plan, "Index Scan") || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
			t.Errorf("%+v: the page's plan reads more than the page:\n%s", q, plan)
		}
	}
}

func idOf(ms []conversation.Meta) string {
	if len(ms) == 0 {
		return "nothing"
	}
	return ms[0].ID
}

func countOf(op string) uint64 {
	for _, o := range storeops.All() {
		if o.Store == "postgres" && o.Op == op {
			return o.N
		}
	}
	return 0
}

func explain(t *testing.T, conn *pgx.Conn, q conversation.PageQuery) string {
	t.Helper()
	sql, args, err := postgres.PageSQL(q)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
