package main

import (
	"io"
	"testing"
	"time"
)

// BenchmarkEchoTurn runs b.N echo turns (8 conversations at once, the
// in-memory sandbox, a fresh directory store) through the harness and
// reports the server's own cost per turn, as the harness measures it in
// the server's process: CPU ms a turn, heap and RSS a running turn
// (KiB), store operations a turn. Go's own ns/op is the harness's wall
// time a turn, which on a loaded machine says little; compare the
// server's figures (docs/benchmarks.md, "Scale"):
//
//	go test ./cmd/outpost-load -run '^$' -bench EchoTurn -benchtime 200x -count 3
func BenchmarkEchoTurn(b *testing.B) {
	const conversations = 8
	turns := max(1, (b.N+conversations-1)/conversations)
	cfg := &config{conversations: conversations, turns: turns, watchers: 1, replicas: 1,
		maxTurns: 1 << 20, timeout: 10 * time.Minute, sandbox: memProvider}
	b.ResetTimer()
	rep, err := run(b.Context(), cfg, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Results != rep.Turns {
		b.Fatalf("%d results for %d turns", rep.Results, rep.Turns)
	}
	b.ReportMetric(rep.CPUPerTurn, "server-cpu-ms/turn")
	b.ReportMetric(float64(rep.HeapPerRun)/1024, "heap-KiB/running-turn")
	b.ReportMetric(float64(rep.RSSPerRunning)/1024, "rss-KiB/running-turn")
	b.ReportMetric(rep.StoreOps, "store-ops/turn")
}
