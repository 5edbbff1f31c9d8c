// Package fakeapi is what the fake model APIs under it share (anthropic,
// openai, gemini): test infrastructure that the real CLIs talk to on
// loopback.
package fakeapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// TB is the part of testing.TB that the fakes' Start functions use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Started is a fake's New for tests: it fails the test when err is set
// (name prefixes the message) and closes s at the test's cleanup.
func Started[S interface{ Close() }](t TB, name string, s S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(s.Close)
	return s
}

// RefusedURL returns the base URL (http://127.0.0.1:PORT) of a loopback
// port on which connections are refused (RefusedAddr: the port is held,
// so no other server can take it), for "no server" tests.
func RefusedURL() (string, error) {
	addr, err := RefusedAddr()
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// Lifecycle starts a fake's HTTP server on loopback, counts the handlers
// that run and stops it: Close unblocks hung and slow handlers (Done),
// closes every connection and waits for the handlers to return. The zero
// value is ready for Serve.
type Lifecycle struct {
	srv       *http.Server
	ln        net.Listener
	done      chan struct{}
	served    chan struct{} // closed once srv.Serve returned
	closeOnce sync.Once

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup // Add only under mu while !closed
}

// Serve serves h on 127.0.0.1 with a free port and returns the base URL
// (http://127.0.0.1:PORT).
func (l *Lifecycle) Serve(h http.Handler) (string, error) { return l.ServeOn("127.0.0.1:0", h) }

// ServeOn serves h on addr, which must be a loopback address.
func (l *Lifecycle) ServeOn(addr string, h http.Handler) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("bad address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("address %q is not loopback", addr)
	}
	if l.ln, err = net.Listen("tcp", addr); err != nil {
		return "", err
	}
	l.done, l.served = make(chan struct{}), make(chan struct{})
	l.srv = &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(l.served)
		_ = l.srv.Serve(l.ln)
	}()
	return "http://" + l.ln.Addr().String(), nil
}

// Addr is the listening address (127.0.0.1:PORT).
func (l *Lifecycle) Addr() string { return l.ln.Addr().String() }

// Enter counts a handler in; it is false once Close began, and then the
// handler must answer at once (without Leave).
func (l *Lifecycle) Enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.handlers.Add(1)
	return true
}

// Leave counts a handler that entered out.
func (l *Lifecycle) Leave() { l.handlers.Done() }

// Done is closed once Close began: handlers that wait return.
func (l *Lifecycle) Done() <-chan struct{} { return l.done }

// Wait pauses a handler for d, or until the client (ctx) goes away or
// Close begins; it reports whether d passed. d <= 0 does not pause, but
// reports false when the client or the server is gone already.
func (l *Lifecycle) Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-ctx.Done():
			return false
		case <-l.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-l.done:
		return false
	}
}

// Block holds a handler until the client (ctx) goes away or Close begins.
func (l *Lifecycle) Block(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-l.done:
	}
}

// Close stops the server and waits for its handlers. It is safe to call
// more than once.
func (l *Lifecycle) Close() {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.done)
		_ = l.srv.Close()
		<-l.served
		l.handlers.Wait()
	})
}

// Queue is a fake's queue of scenarios, safe for concurrent use: each
// request takes the next one before any chooser or marker is consulted.
type Queue[S any] struct {
	mu    sync.Mutex
	items []S
}

// Push appends scenarios.
func (q *Queue[S]) Push(sc ...S) {
	q.mu.Lock()
	q.items = append(q.items, sc...)
	q.mu.Unlock()
}

// Pop takes the next scenario, if there is one.
func (q *Queue[S]) Pop() (S, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var sc S
	if len(q.items) == 0 {
		return sc, false
	}
	sc, q.items = q.items[0], q.items[1:]
	return sc, true
}

// Clear empties the queue.
func (q *Queue[S]) Clear() {
	q.mu.Lock()
	q.items = nil
	q.mu.Unlock()
}

// Len is the number of scenarios queued.
func (q *Queue[S]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Log is a fake's record of the requests it received, in arrival order,
// safe for concurrent use: a handler records its request once and
// changes it after (how its reply ended) only through Update, so that All
// copies each request whole.
type Log[R any] struct {
	mu      sync.Mutex
	reqs    []*R
	arrived chan struct{}
}

// Add records r and sets *seq (r's Seq field) to its number, from 1.
func (l *Log[R]) Add(r *R, seq *int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*seq = len(l.reqs) + 1
	l.reqs = append(l.reqs, r)
	if l.arrived != nil {
		close(l.arrived)
		l.arrived = nil
	}
}

// Update runs change (of a recorded request's fields) under the log's
// lock.
func (l *Log[R]) Update(change func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change()
}

// All returns copies of the recorded requests, in arrival order.
func (l *Log[R]) All() []R {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]R, len(l.reqs))
	for i, r := range l.reqs {
		out[i] = *r
	}
	return out
}

// Len is how many requests were recorded, and a channel closed when the
// next one is.
func (l *Log[R]) Len() (int, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.arrived == nil {
		l.arrived = make(chan struct{})
	}
	return len(l.reqs), l.arrived
}

// Clear forgets the recorded requests: numbers start again at 1.
func (l *Log[R]) Clear() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
}

// How a fake's reply ended (each fake's Request.Ended): the tests tell a
// reply a CLI abandoned (and asked again) from one it got whole.
const (
	EndFinished   = "finished"    // written whole (an error answer included)
	EndClientGone = "client gone" // cut: the client's connection closed or failed first
	EndScenario   = "scenario"    // cut, stalled or failed as its scenario says
)

// EndOf is how a reply ended, given whether its handler wrote it whole
// and the request's context (done once the client's connection closed or
// failed).
func EndOf(finished bool, ctx context.Context) string {
	switch {
	case finished:
		return EndFinished
	case ctx.Err() != nil:
		return EndClientGone
	}
	return EndScenario
}

// ContentText is the text of a message's content as the model APIs send
// it: a string; an array of content parts ({type: text|input_text|
// output_text, text}, or strings), their texts joined by newlines; or one
// part ({text} or {content}). Parts without text (images...) are left out.
func ContentText(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			switch pm := p.(type) {
			case string:
				parts = append(parts, pm)
			case map[string]any:
				if t, ok := pm["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	case map[string]any:
		if t, ok := c["text"].(string); ok {
			return t
		}
		if t, ok := c["content"].(string); ok {
			return t
		}
	}
	return ""
}
