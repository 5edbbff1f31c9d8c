package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/pgtest"
)

// TestMain makes the test binary the harness's servers too: the harness
// starts os.Executable() as `serve`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveSubcommand {
		os.Exit(dispatch(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(pgtest.Run(m))
}

// runLoad runs the harness with args and returns its JSON report.
func runLoad(t *testing.T, args ...string) *report {
	t.Helper()
	jsonl := filepath.Join(t.TempDir(), "runs.jsonl")
	var stdout, stderr bytes.Buffer
	if code := dispatch(t.Context(), append(args, "--json", jsonl, "--timeout", "2m"), &stdout, &stderr); code != 0 {
		t.Fatalf("outpost-load %v: exit %d\n%s\n%s", args, code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the report: %v\n%s", err, b)
	}
	t.Logf("%s", stdout.String())
	return &r
}

// checkCounts holds a run's counts to what it was asked: every turn one
// result and no error, nothing lost or doubled, the servers' figures read.
// It never looks at a time.
func checkCounts(t *testing.T, r *report, turns, watchers int) {
	t.Helper()
	if r.Turns != turns || r.Results != turns || r.Lost != 0 || r.Duplicated != 0 || len(r.Errors) != 0 || r.CutStreams != 0 {
		t.Errorf("turns %d, results %d, lost %d, duplicated %d, errors %v, cut streams %d; want %d turns, each with one result",
			r.Turns, r.Results, r.Lost, r.Duplicated, r.Errors, r.CutStreams, turns)
	}
	// An echo turn's stream: session, message, usage/finished..., result.
	if min := float64(4 * watchers); r.EventsPerTurn < min {
		t.Errorf("%.1f events per turn to %d watchers, want at least %.0f", r.EventsPerTurn, watchers, min)
	}
	if r.CPUSeconds <= 0 || r.PeakRSS <= 0 || r.GoroutinesIn <= 0 || r.StoreOps <= 0 {
		t.Errorf("the servers' figures were not read: CPU %v s, peak RSS %d, goroutines %v, store ops/turn %v", r.CPUSeconds, r.PeakRSS, r.GoroutinesIn, r.StoreOps)
	}
	if r.StoreOpsBy["put/filesystem"] != 1 && r.StoreOpsBy["put/postgres"] != 1 {
		t.Errorf("store operations per turn %v: want exactly one put of the conversation per turn", r.StoreOpsBy)
	}
}

// TestLoad runs the harness at a CI size: a directory store with
// watchers and stored conversations, and two replicas on one PostgreSQL.
func TestLoad(t *testing.T) {
	t.Run("filesystem", func(t *testing.T) {
		r := runLoad(t, "--conversations", "4", "--turns", "2", "--watchers", "2", "--stored", "20")
		checkCounts(t, r, 8, 2)
		if r.Stored == nil || len(r.Stored.Ops) != 5 || r.Stored.DiskBytes <= 0 {
			t.Fatalf("stored figures: %+v", r.Stored)
		}
		for _, op := range r.Stored.Ops {
			if op.Count == 0 || op.Bytes == 0 && !strings.HasPrefix(op.Name, "resume") { // a resume is timed, not read
				t.Errorf("%s: %+v", op.Name, op)
			}
		}
	})
	t.Run("fleet", func(t *testing.T) {
		url := pgtest.NewDB(t)
		r := runLoad(t, "--conversations", "4", "--turns", "2", "--replicas", "2", "--store", url)
		checkCounts(t, r, 8, 1)
		if r.StoreOpsBy["create/postgres-turns"] != 1 {
			t.Errorf("turn records created per turn: %v, want 1", r.StoreOpsBy["create/postgres-turns"])
		}
	})
}

// TestFlags: the bounds are refused before anything starts.
func TestFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--conversations 10 --turns 10 --max-turns 99", "over --max-turns"},
		{"--replicas 2", "PostgreSQL --store"},
		{"--store postgres://u@db.example.com/x", "not loopback"},
		{"--store postgres://u@10.0.0.1/x", "not loopback"},
		{"--store /tmp/dir", "want a postgres:// URL"},
		{"--turns 0", "≥ 1"},
	} {
		_, err := parseFlags(strings.Fields(tc.args), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"--store", "postgres://u@127.0.0.1/x", "--replicas", "3"}, &bytes.Buffer{}); err != nil {
		t.Errorf("a loopback store: %v", err)
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); err != errHelp || !strings.Contains(help.String(), "Bounds:") {
		t.Errorf("--help: %v\n%s", err, help.String())
	}
}

// TestChaosFlags: the chaos run refuses what it cannot do before it
// starts anything (its run is scripts/chaos.sh's; integration's
// TestChaosFleet runs a small one).
func TestChaosFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "needs a PostgreSQL database"},
		{"--store postgres://u@db.example.com/x", "not loopback"},
		{"--store postgres://u@127.0.0.1/x --replicas 1", "≥ 2"},
		{"--store postgres://u@127.0.0.1/x extra", "unexpected argument"},
	} {
		_, err := parseChaos(strings.Fields(tc.args), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chaos %s: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	var help bytes.Buffer
	if _, err := parseChaos([]string{"--help"}, &help); err != errHelp || !strings.Contains(help.String(), "never point it at shared ones") {
		t.Errorf("chaos --help: %v\n%s", err, help.String())
	}
	if got := codeOf([]byte(`{"error":{"code":"sandbox","details":{"replica_lost":"r1"}}}`)); got != "sandbox/replica_lost" {
		t.Errorf("codeOf(a lost replica's result) = %q", got)
	}
}
