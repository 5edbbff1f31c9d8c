package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// lineWriter writes whole lines, one Write at a time: the SDK's messages
// and the guard's errors never interleave. It tells the guard of each
// response written.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
	g  *guard
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	n, err := l.w.Write(b)
	l.mu.Unlock()
	if id, ok := responseID(b); ok && l.g != nil {
		l.g.answered(id)
	}
	return n, err
}

// responseID is the id of a response the SDK writes: its messages begin
// {"jsonrpc":"2.0","id":ID, and a response's next field is not "method".
func responseID(b []byte) (string, bool) {
	if !bytes.HasPrefix(b, []byte(`{"jsonrpc":"2.0","id":`)) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for range 3 { // {, "jsonrpc", "2.0"
		if _, err := dec.Token(); err != nil {
			return "", false
		}
	}
	if k, err := dec.Token(); err != nil || k != "id" {
		return "", false
	}
	var id json.RawMessage
	if err := dec.Decode(&id); err != nil {
		return "", false
	}
	if next, err := dec.Token(); err != nil || next == "method" {
		return "", false
	}
	return string(id), true
}

// guard reads the client's lines and passes the JSON-RPC messages on to
// the SDK's reader. It answers itself what the SDK would only log: a line
// that is not JSON (-32700 Parse error), a JSON value that is not a
// JSON-RPC message — a batch, a message with neither method nor result
// (-32600 Invalid request) — and a line over max bytes (-32600, with the
// request's id when its first bytes name one, so the client's call fails
// instead of waiting). The connection goes on after each.
type guard struct {
	w   *lineWriter
	max int
	log *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	failed  error           // reading the input failed (not its end)
	pending map[string]bool // ids of requests passed on and not answered
}

func newGuard(max int, log *slog.Logger) *guard {
	g := &guard{max: max, log: log, pending: map[string]bool{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *guard) answered(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, id)
	g.cond.Broadcast()
}

func (g *guard) pendingCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// waitIdle waits until every request passed on was answered, at most d;
// it reports whether they were.
func (g *guard) waitIdle(d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The flag is this wait's own, set under g.mu: a timer that fires
	// before the wait begins (d of zero, a loaded machine) still ends it.
	expired := false
	t := time.AfterFunc(max(d, 0), func() {
		g.mu.Lock()
		expired = true
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer t.Stop()
	for len(g.pending) > 0 && !expired {
		g.cond.Wait()
	}
	return len(g.pending) == 0
}

// keep is how much of an overlong line is kept to find its id.
const keep = 64 << 10

// run passes the input's messages on to pw until the input ends (the
// caller then closes pw) or pw is closed.
func (g *guard) run(in io.Reader, pw *io.PipeWriter) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, over, err := readLine(br, g.max)
		if over > 0 {
			g.reply(idOf(line), -32600, "Invalid request", fmt.Sprintf("message of %d bytes over the limit of %d bytes", over, g.max))
		} else if id, ok := g.check(line); ok {
			if id != "" {
				g.mu.Lock()
				g.pending[id] = true
				g.mu.Unlock()
			}
			if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				g.mu.Lock()
				g.failed = err
				g.mu.Unlock()
			}
			return
		}
	}
}

func (g *guard) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// readLine reads one line without its newline. A line longer than max is
// read to its end and dropped: line is then its first bytes (up to keep)
// and over its length.
func readLine(br *bufio.Reader, max int) (line []byte, over int, err error) {
	var buf []byte
	n := 0
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		if n <= max+1 {
			buf = append(buf, frag...)
		} else if len(buf) < keep {
			buf = append(buf, frag[:min(len(frag), keep-len(buf))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(buf, "\r\n")
		if n > max+1 {
			return line, n, err
		}
		return line, 0, err
	}
}

// check reports whether line goes on to the SDK, with a request's id, and
// answers it when not.
func (g *guard) check(line []byte) (string, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return "", false
	}
	if !json.Valid(line) {
		g.reply(nil, -32700, "Parse error", "the line is not JSON")
		return "", false
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if line[0] != '{' || json.Unmarshal(line, &m) != nil {
		g.reply(nil, -32600, "Invalid request", "a JSON-RPC message is one JSON object (batches are not taken)")
		return "", false
	}
	var method string
	if m.Method != nil && json.Unmarshal(m.Method, &method) != nil {
		g.reply(m.ID, -32600, "Invalid request", "method is not a string")
		return "", false
	}
	if method == "" && (m.ID == nil || (m.Result == nil && m.Error == nil)) {
		g.reply(m.ID, -32600, "Invalid request", "neither a request, a notification nor a response")
		return "", false
	}
	if method == "" || m.ID == nil {
		return "", true // a response, or a notification: nothing to answer
	}
	return string(m.ID), true
}

// reply writes a JSON-RPC error response; a nil id is null.
func (g *guard) reply(id json.RawMessage, code int, msg, data string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	type rpcErr struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Data    map[string]string `json:"data"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcErr          `json:"error"`
	}{"2.0", id, rpcErr{code, msg, map[string]string{"error": data}}})
	g.log.Warn("outpost acp: refused a message", "code", code, "error", data)
	_, _ = g.w.Write(append(b, '\n'))
}

// idOf finds the top-level "id" of a message's first bytes; nil when they
// do not reach it.
func idOf(prefix []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k == "id" {
			var probe any
			if json.Unmarshal(v, &probe) != nil {
				return nil
			}
			switch probe.(type) {
			case string, float64:
				return v
			}
			return nil
		}
	}
	return nil
}
