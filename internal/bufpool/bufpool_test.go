package bufpool

import (
	"bytes"
	"strings"
	"testing"
)

// TestLent: what goes through a lent reader, writer or copy is what was
// given, buffer after buffer; a lent buffer is not a new allocation.
func TestLent(t *testing.T) {
	in := strings.Repeat("outpost\n", 20000) // over two buffers
	for range 3 {
		br := Reader(strings.NewReader(in))
		var out bytes.Buffer
		if _, err := br.WriteTo(&out); err != nil || out.String() != in {
			t.Fatalf("reader: %v, %d bytes of %d", err, out.Len(), len(in))
		}
		PutReader(br)
		out.Reset()
		bw := Writer(&out)
		bw.WriteString(in)
		if err := bw.Flush(); err != nil || out.String() != in {
			t.Fatalf("writer: %v, %d bytes", err, out.Len())
		}
		PutWriter(bw)
		out.Reset()
		if n, err := Copy(onlyWriter{&out}, onlyReader{strings.NewReader(in)}); err != nil || n != int64(len(in)) || out.String() != in {
			t.Fatalf("copy: %d, %v", n, err)
		}
	}
	if !Kept {
		return // the race detector drops lent buffers at random
	}
	// No collection runs within AllocsPerRun's loop here: the pool keeps
	// what was given back, so a lend and its return allocate nothing.
	if a := testing.AllocsPerRun(100, func() { PutReader(Reader(strings.NewReader(""))) }); a > 1 {
		t.Errorf("a lent reader: %.0f allocations, want at most the strings.Reader", a)
	}
}

// onlyWriter and onlyReader hide WriterTo and ReaderFrom, so Copy uses
// its buffer.
type onlyWriter struct{ w *bytes.Buffer }

func (w onlyWriter) Write(b []byte) (int, error) { return w.w.Write(b) }

type onlyReader struct{ r *strings.Reader }

func (r onlyReader) Read(b []byte) (int, error) { return r.r.Read(b) }
