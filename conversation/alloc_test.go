package conversation_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/bufpool"
)

// TestFSPutGetLendsBuffers: a Put and a Get of a small conversation borrow
// their 64 KiB buffered writer and reader (internal/bufpool) rather than
// allocating them for each turn (docs/benchmarks.md, "Scale"), and read
// back what was written.
func TestFSPutGetLendsBuffers(t *testing.T) {
	s := conversation.NewFS(t.TempDir())
	ctx := t.Context()
	m := conversation.Meta{ID: conversation.NewID(), Agent: "echo", Native: "n1", Workdir: "/w", Created: time.Now(), Updated: time.Now(), Turns: 1}
	files := []conversation.File{{Path: ".echo/sessions/n1.jsonl", Mode: 0o600, Data: []byte("{}\n")}}
	cycle := func() {
		if err := s.Put(ctx, m, files); err != nil {
			t.Fatal(err)
		}
		m.Revision++
		_, fs, err := s.Get(ctx, m.ID)
		if err != nil || len(fs) != 1 || string(fs[0].Data) != "{}\n" {
			t.Fatalf("get: %v, %+v", err, fs)
		}
	}
	cycle()
	if !bufpool.Kept {
		return // the race detector drops lent buffers at random
	}
	const n = 20
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		cycle()
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 64<<10 {
		t.Errorf("a put and a get allocated %d bytes, want under 64 KiB (their buffers are lent)", per)
	}
}
