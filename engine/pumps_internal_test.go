package engine

import (
	"runtime"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/bufpool"
)

// TestReadLinesLendsItsBuffer: reading an agent's output borrows its 64 KiB
// buffer (internal/bufpool) rather than allocating one for each stream of
// each turn (a third of the bytes an echo turn allocated in the server,
// docs/benchmarks.md "Scale"), and gives the lines as before.
func TestReadLinesLendsItsBuffer(t *testing.T) {
	in := "one\r\n\n  \ntwo\n" + strings.Repeat("x", 100) + "\nlast"
	var got []string
	read := func() {
		got = got[:0]
		readLines(strings.NewReader(in), 50, func(l []byte, dropped int) {
			if l == nil {
				got = append(got, "dropped "+strings.Repeat("#", dropped/25))
				return
			}
			got = append(got, string(l))
		})
	}
	read()
	if want := "one|two|dropped ####|last"; strings.Join(got, "|") != want {
		t.Fatalf("lines %q, want %q", strings.Join(got, "|"), want)
	}
	if !bufpool.Kept {
		return // the race detector drops lent buffers at random
	}
	const n = 20
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		read()
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 16<<10 {
		t.Errorf("reading 5 lines allocated %d bytes a time, want under 16 KiB (the 64 KiB buffer is lent)", per)
	}
}
