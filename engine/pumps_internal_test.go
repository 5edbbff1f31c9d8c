package engine

import (
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/bufpool"
)

// TestReadLinesLendsItsBuffer: reading an agent's output borrows its
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
		t.Errorf("reading 5 lines allocated %d bytes a time, want under 16 KiB (the buffer is lent)", per)
	}
}

// TestReadLinesWaitsSmall: a stream waiting for the agent's next line (a
// running turn has two) holds a buffer of a few KiB, not the 64 KiB it
// held: at 1,000 running turns, 8 MiB instead of 128 MiB. A line longer
// than the buffer is read whole.
func TestReadLinesWaitsSmall(t *testing.T) {
	long := strings.Repeat("y", 3*bufpool.LineSize+7)
	var got []string
	readLines(strings.NewReader("one\n"+long+"\r\nlast"), 0, func(l []byte, _ int) { got = append(got, string(l)) })
	if len(got) != 3 || got[1] != long || got[2] != "last" {
		t.Fatalf("lines of %d bytes: %d lines", len(long), len(got))
	}

	const n = 32
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var ws []*io.PipeWriter
	done := make(chan struct{}, n)
	for range n {
		r, w := io.Pipe()
		ws = append(ws, w)
		go readLines(r, 0, func([]byte, int) { done <- struct{}{} })
		w.Write([]byte("a line\n")) // the reader has its buffer now
	}
	for range n {
		<-done
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	for _, w := range ws {
		w.Close()
	}
	if per := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / n; per > 16<<10 {
		t.Errorf("a waiting stream holds %d bytes of heap, want under 16 KiB", per)
	}
}
