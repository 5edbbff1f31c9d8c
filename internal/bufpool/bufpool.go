// Package bufpool lends the buffers a turn's I/O goes through (the
// buffered readers and writers of stored conversations and of an agent's
// output, the copy buffers of archives), so that a turn does not allocate
// a fresh 64 KiB for each: on the server's path they were a third of the
// bytes allocated per echo turn (docs/benchmarks.md, "Scale").
//
// A buffer given back must not be used again, nor any slice of it.
package bufpool

import (
	"bufio"
	"io"
	"sync"
)

// Size is the size of the buffered readers and writers lent.
const Size = 64 << 10

// LineSize is the size of the buffered readers LineReader lends: small,
// as a stream that waits most of its life (an agent's output: each
// running turn holds two) holds it while it waits; a longer line is
// read in pieces (ErrBufferFull) by its reader.
const LineSize = 4 << 10

// copySize is the size of a copy buffer, io.Copy's own.
const copySize = 32 << 10

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, Size) }}
	lines   = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, LineSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, Size) }}
	copies  = sync.Pool{New: func() any { b := make([]byte, copySize); return &b }}
)

// Reader lends a buffered reader of Size bytes reading r.
func Reader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// PutReader gives br back (Reader's only).
func PutReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// LineReader lends a buffered reader of LineSize bytes reading r.
func LineReader(r io.Reader) *bufio.Reader {
	br := lines.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// PutLineReader gives br back (LineReader's only).
func PutLineReader(br *bufio.Reader) {
	br.Reset(nil)
	lines.Put(br)
}

// Writer lends a buffered writer of Size bytes writing to w.
func Writer(w io.Writer) *bufio.Writer {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

// PutWriter gives bw back (Writer's only), unflushed data dropped.
func PutWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writers.Put(bw)
}

// Copy is io.Copy with a lent buffer, for a source that is not a file
// (an archive's entry, a pipe): dst's ReadFrom is not used, as an
// *os.File's would copy through a buffer of its own.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	b := copies.Get().(*[]byte)
	defer copies.Put(b)
	return io.CopyBuffer(struct{ io.Writer }{dst}, src, *b)
}
