package meter

import (
	"bytes"
	"io"
	"sync"
	"time"
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

// Bounds of reading on after the agent closed a body before its final
// usage (an abandoned reply): the bytes and the time the upstream gets to
// reach its usage.
const (
	drainBytes = 8 << 20
	drainTime  = 2 * time.Minute
)

// Close ends the agent's reading. A body closed before its final usage
// was read is read on, upstream-side (drain), up to drainBytes and
// drainTime, so that an abandoned reply is counted in full; what stays
// unread is charged (charge).
func (b *body) Close() error {
	b.mu.Lock()
	if !b.ended && !b.c.final() {
		b.mu.Unlock()
		// Charged at once, so that the agent's next call is checked
		// against it; the usage the drain reads replaces the charge.
		b.c.update(charge(b.c))
		go b.drain()
		return nil
	}
	b.end(false)
	b.mu.Unlock()
	return b.rc.Close()
}

// drain reads the rest of an abandoned body into the usage reader only.
func (b *body) drain() {
	stop := time.AfterFunc(drainTime, func() { _ = b.rc.Close() })
	defer stop.Stop()
	buf := make([]byte, 32<<10)
	for n := 0; n < drainBytes; {
		k, err := b.Read(buf)
		n += k
		if err != nil {
			break
		}
	}
	b.mu.Lock()
	b.end(false)
	b.mu.Unlock()
	_ = b.rc.Close()
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
	if !clean {
		b.c.update(charge(b.c))
	}
	b.c.done(clean)
}

// charge is what a call whose body ended (or was left by the agent)
// before its final usage counts, when Before saw its request: the output
// limit the request named (or DefaultMaxOutput) as output, and the
// prompt's estimate as input when the API said nothing of it. The count
// stays incomplete; usage read later replaces the charge.
func charge(c *call) func(*reading) {
	return func(r *reading) {
		if r.final || c.prep.maxOut == 0 {
			return
		}
		r.out = max(r.out, c.prep.maxOut)
		if !r.seen {
			r.in = max(r.in, c.est)
		}
	}
}
