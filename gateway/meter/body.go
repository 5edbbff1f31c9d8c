package meter

import (
	"bytes"
	"io"
	"sync"
)

// Bounds of what a body reader keeps: one SSE line and one SSE event
// (the usage-bearing ones are small; a longer one is skipped and the
// count marked incomplete), and a whole JSON response, which is read at
// its end.
const (
	maxLine  = 4 << 20
	maxEvent = 8 << 20
	maxJSON  = 16 << 20
)

// body wraps an upstream response's Body: every byte read passes through
// unchanged and at once, and is also fed to the usage reader. SSE keeps
// only the current line and event; a JSON body is kept (bounded) until
// its end.
type body struct {
	rc  io.ReadCloser
	c   *call
	sse bool

	mu    sync.Mutex
	line  []byte // SSE: the current line, before its newline
	data  []byte // SSE: the current event's data lines
	skip  bool   // SSE: the current line is too long and is dropped
	json  []byte // JSON: the body so far
	over  bool   // JSON: the body went past maxJSON
	ended bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.ended {
		b.feed(p[:n])
	}
	if err != nil {
		b.end(err == io.EOF)
	}
	return n, err
}

// Close ends the reading: a body closed before its end is counted as far
// as it was read, and marked incomplete unless its final usage was read.
func (b *body) Close() error {
	b.mu.Lock()
	b.end(false)
	b.mu.Unlock()
	return b.rc.Close()
}

func (b *body) feed(p []byte) {
	if !b.sse {
		if b.over {
			return
		}
		if len(b.json)+len(p) > maxJSON {
			b.over, b.json = true, nil
			return
		}
		b.json = append(b.json, p...)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.appendLine(p)
			return
		}
		b.appendLine(p[:i])
		p = p[i+1:]
		b.lineDone()
	}
}

func (b *body) appendLine(p []byte) {
	if b.skip {
		return
	}
	if len(b.line)+len(p) > maxLine {
		b.skip, b.line = true, b.line[:0]
		b.c.update(func(r *reading) { r.broken = true })
		return
	}
	b.line = append(b.line, p...)
}

// lineDone handles one complete SSE line: data lines gather, a blank line
// dispatches the event; other fields (event, id, retry, comments) do not
// matter to usage.
func (b *body) lineDone() {
	line := bytes.TrimSuffix(b.line, []byte("\r"))
	skipped := b.skip
	b.line, b.skip = b.line[:0], false
	switch {
	case skipped:
	case len(line) == 0:
		b.dispatch()
	case bytes.HasPrefix(line, []byte("data:")):
		d := bytes.TrimPrefix(line[5:], []byte(" "))
		if len(b.data)+len(d)+1 > maxEvent {
			b.data = b.data[:0]
			b.c.update(func(r *reading) { r.broken = true })
			return
		}
		if len(b.data) > 0 {
			b.data = append(b.data, '\n')
		}
		b.data = append(b.data, d...)
	}
}

func (b *body) dispatch() {
	if len(b.data) == 0 {
		return
	}
	// Only events that may carry usage, or a model not yet known, are
	// decoded: content deltas are the bulk of a stream.
	if bytes.Contains(b.data, []byte(`"usage`)) || (b.c.model() == "" && bytes.Contains(b.data, []byte(`"model`))) {
		b.c.update(func(r *reading) { r.event(b.c.api, b.data) })
	}
	b.data = b.data[:0]
}

// end reads what is left once the body ended (clean: at EOF) or was
// closed, and settles the call. It runs once.
func (b *body) end(clean bool) {
	if b.ended {
		return
	}
	b.ended = true
	if b.sse {
		if clean && !b.skip {
			b.lineDone()
		}
		if clean {
			b.dispatch()
		}
	} else if b.over {
		b.c.update(func(r *reading) { r.broken = true })
	} else {
		b.c.update(func(r *reading) {
			r.event(b.c.api, b.json)
			r.final = r.final || r.seen
		})
	}
	b.line, b.data, b.json = nil, nil, nil
	b.c.done(clean)
}
