package gateway

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// limit bounds the connections of l served at once. An authenticated
// connection (one that carried a live grant's token) counts against
// Options.MaxConns: beyond it, its request gets 503 and the connection
// closes. One not (yet) authenticated counts only against
// Options.MaxPendingConns: a new connection beyond it closes the oldest
// such one, so that idle or hostile unauthenticated connections never
// keep a turn's model calls out.
func (g *Gateway) limit(l net.Listener) net.Listener {
	return &limitListener{Listener: l, max: g.opts.MaxConns, maxPending: g.opts.MaxPendingConns}
}

type limitListener struct {
	net.Listener
	max, maxPending int

	mu      sync.Mutex
	auth    int       // authenticated connections open
	pending list.List // *limitConn not authenticated, oldest first
}

// The states of a limitConn, under its listener's mu.
const (
	connPending = iota
	connAuth
	connClosed
)

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l}
	var evict *limitConn
	l.mu.Lock()
	if l.pending.Len() >= l.maxPending {
		evict = l.pending.Remove(l.pending.Front()).(*limitConn)
		evict.state, evict.elem = connClosed, nil
	}
	lc.elem = l.pending.PushBack(lc)
	l.mu.Unlock()
	if evict != nil {
		_ = evict.Conn.Close()
	}
	return lc, nil
}

// limitConn is a connection of a limitListener; it gives its slot back
// once, when closed.
type limitConn struct {
	net.Conn
	l     *limitListener
	state int           // under l.mu
	elem  *list.Element // in l.pending while connPending
}

// promote moves the connection into the authenticated count; false when
// that is full (or the connection was closed meanwhile).
func (c *limitConn) promote() bool {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case c.state == connAuth:
		return true
	case c.state == connClosed || l.auth >= l.max:
		return false
	}
	l.pending.Remove(c.elem)
	c.state, c.elem = connAuth, nil
	l.auth++
	return true
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	l := c.l
	l.mu.Lock()
	switch c.state {
	case connPending:
		l.pending.Remove(c.elem)
	case connAuth:
		l.auth--
	}
	c.state, c.elem = connClosed, nil
	l.mu.Unlock()
	return err
}

// CloseWrite half-closes the connection when the one beneath can (a
// CONNECT tunnel's client side).
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

type connKey struct{}

// admit counts the request's connection as authenticated (its request
// carried a live grant's token); when the gateway already serves
// Options.MaxConns such connections, it answers 503 and the connection
// closes.
func admit(w http.ResponseWriter, r *http.Request) bool {
	lc, ok := r.Context().Value(connKey{}).(*limitConn)
	if !ok || lc.promote() {
		return true
	}
	w.Header().Set("Connection", "close")
	refuse(w, http.StatusServiceUnavailable, "too many connections")
	return false
}

// bufferPool lends the proxies their copy buffers (httputil.BufferPool),
// so a streamed reply costs no 32 KiB allocation per request.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
