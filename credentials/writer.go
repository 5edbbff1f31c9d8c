package credentials

import (
	"errors"
	"io"
	"sync"
)

// ErrWriterClosed is returned by Write after Close on a redacting writer.
var ErrWriterClosed = errors.New("credentials: write to closed redacting writer")

// Writer returns a writer that copies to w with every secret redacted, for
// logs and stderr passthrough. A secret split across Write calls is still
// redacted: the writer holds back only the bytes at the end of what it has
// seen that could begin a secret (never more than the longest secret's
// length minus one, plus the tail of a secret it has started redacting),
// and writes everything else at once, so lines without secrets flow through
// unchanged and promptly. The output equals String of everything written.
//
// Close writes the held-back bytes; it does not close w. Write after Close
// fails with ErrWriterClosed. The first error from w is returned by that and
// every later Write and by Close. The writer is safe for concurrent use;
// secrets added to r later apply to later writes.
//
// One limit: a secret that overlaps Redacted itself (it begins with "]" or
// "D]", ends with "[" or "[R", or contains "[REDACTED]") can re-form across
// the boundary of two flushes; String handles that case, the writer does
// not.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &redactWriter{r: r, w: w}
}

type redactWriter struct {
	r *Redactor
	w io.Writer

	mu     sync.Mutex
	buf    []byte // held back bytes
	cover  int    // leading bytes of buf that belong to a redaction already started
	mark   bool   // the last byte written was the end of a Redacted
	out    []byte // reused output buffer
	err    error
	closed bool
}

func (w *redactWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrWriterClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	s := w.r.load()
	if err := w.flush(s, len(w.buf)-s.hold(w.buf)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *redactWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	return w.flush(w.r.load(), len(w.buf))
}

// flush writes buf[:cut] redacted and keeps the rest.
func (w *redactWriter) flush(s *secretSet, cut int) error {
	if cut <= 0 {
		return nil
	}
	sp := find(s.pm, w.buf)
	if w.cover > 0 {
		sp = mergeSpans(append(sp, span{0, w.cover}))
	}
	out := w.out[:0]
	pos, cover := 0, 0
	for _, x := range sp {
		if x.start >= cut {
			break
		}
		out = append(out, w.buf[pos:x.start]...)
		// A run starting where the previous flush ended on a mark continues
		// that mark, as String would merge them.
		if !(x.start == 0 && w.mark) {
			out = append(out, Redacted...)
		}
		pos = min(x.end, cut)
		if x.end > cut {
			cover = x.end - cut
		}
	}
	out = append(out, w.buf[pos:cut]...)
	// pos reaches cut (> 0) only through a run: the chunk ends on a mark.
	mark := pos == cut
	w.out = out
	n := copy(w.buf, w.buf[cut:])
	w.buf = w.buf[:n]
	w.cover = cover
	w.mark = mark
	if len(out) == 0 {
		return nil
	}
	if _, err := w.w.Write(out); err != nil {
		w.err = err
		return err
	}
	return nil
}

// hold returns how many bytes at the end of b could be the start of a
// secret not yet complete: the longest suffix of b that is a proper prefix
// of some secret.
func (s *secretSet) hold(b []byte) int {
	best := 0
	for i, p := range s.bplain {
		if len(p)-1 <= best {
			break // longest first: no later secret can hold more
		}
		pi := s.fail[i]
		start := max(0, len(b)-(len(p)-1))
		q := int32(0)
		for _, c := range b[start:] {
			for q > 0 && p[q] != c {
				q = pi[q-1]
			}
			if p[q] == c {
				q++
			}
			if int(q) == len(p) {
				q = pi[q-1]
			}
		}
		best = max(best, int(q))
	}
	return best
}
