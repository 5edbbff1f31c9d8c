package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestNewDB(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.NewDB(t), pgtest.NewDB(t)
	if a == b {
		t.Fatalf("two tests share %s", a)
	}
	c, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "select current_setting('listen_addresses')").Scan(&v); err != nil || v != "" {
		t.Errorf("listen_addresses = %q, %v; want no TCP listener", v, err)
	}
}
