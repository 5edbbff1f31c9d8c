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

func TestListening(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Listening(t, "127.0.0.1", "127.0.0.0/8")
	c, err := pgx.Connect(ctx, s.TCPURL("postgres"))
	if err != nil {
		t.Fatalf("connect over TCP: %v", err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "select current_setting('listen_addresses')").Scan(&v); err != nil || v != "127.0.0.1" {
		t.Errorf("listen_addresses = %q, %v; want 127.0.0.1", v, err)
	}
	// The trust rule names the CIDR (initdb's own are for 127.0.0.1/32
	// and ::1 only).
	var n int
	if err := c.QueryRow(ctx, "select count(*) from pg_hba_file_rules where type = 'host' and address = '127.0.0.0' and netmask = '255.0.0.0' and auth_method = 'trust'").Scan(&n); err != nil || n != 1 {
		t.Errorf("pg_hba rules for 127.0.0.0/8 with trust: %d, %v; want 1", n, err)
	}
}
