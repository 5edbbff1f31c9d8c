package server

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A connection is unauthenticated from its accept until a request on it
// authenticates (a valid token, an allowed Unix peer, or any request when
// the server has no tokens). Before that a client has Options.AuthTimeout
// in all (headers, and whatever body the server would drain after
// refusing it), after which the connection is closed; and at most
// Options.MaxUnauthConns such connections are held: a new one closes the
// oldest. So idle or trickling clients (slowloris) cannot exhaust serve's
// connections, and a client that sends its request at once (every real
// one) always gets in. Once authenticated, a connection is bounded by the
// http.Server's own timeouts only (issue 43).
type connGuard struct {
	max     int
	timeout time.Duration

	mu      sync.Mutex
	unauth  list.List // of *guardConn, oldest first
	evicted int64     // connections closed to make room (for tests)
}

func newConnGuard(max int, timeout time.Duration) *connGuard {
	return &connGuard{max: max, timeout: timeout}
}

// guardListener wraps the connections a listener accepts.
type guardListener struct {
	net.Listener
	g *connGuard
}

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.g.admit(c), nil
}

// guardConn is an accepted connection and its place among the
// unauthenticated ones (nil once authenticated or closed).
type guardConn struct {
	net.Conn
	g     *connGuard
	elem  *list.Element
	timer *time.Timer
	once  sync.Once
	// refused: a request on it was refused authentication; nothing more
	// is read from it (the http.Server would otherwise read on through
	// up to 256 KiB of the refused body before it closes).
	refused atomic.Bool
}

var errRefusedConn = errors.New("the connection's request was refused")

func (c *guardConn) Read(p []byte) (int, error) {
	if c.refused.Load() {
		return 0, errRefusedConn
	}
	return c.Conn.Read(p)
}

// admit registers c as unauthenticated, closing the oldest such
// connection when the cap is reached.
func (g *connGuard) admit(c net.Conn) *guardConn {
	gc := &guardConn{Conn: c, g: g}
	var oldest *guardConn
	g.mu.Lock()
	if g.unauth.Len() >= g.max {
		oldest = g.unauth.Remove(g.unauth.Front()).(*guardConn)
		oldest.elem = nil
		g.evicted++
	}
	gc.elem = g.unauth.PushBack(gc)
	gc.timer = time.AfterFunc(g.timeout, func() { gc.expire() })
	g.mu.Unlock()
	if oldest != nil {
		oldest.timer.Stop()
		oldest.Conn.Close()
	}
	return gc
}

// expire closes c if it is still unauthenticated.
func (c *guardConn) expire() {
	c.g.mu.Lock()
	still := c.elem != nil
	if still {
		c.g.unauth.Remove(c.elem)
		c.elem = nil
	}
	c.g.mu.Unlock()
	if still {
		c.Conn.Close()
	}
}

// authenticated takes c out of the unauthenticated ones for good.
func (c *guardConn) authenticated() {
	c.once.Do(func() {
		c.g.mu.Lock()
		if c.elem != nil {
			c.g.unauth.Remove(c.elem)
			c.elem = nil
		}
		c.g.mu.Unlock()
		c.timer.Stop()
	})
}

func (c *guardConn) Close() error {
	c.g.mu.Lock()
	if c.elem != nil {
		c.g.unauth.Remove(c.elem)
		c.elem = nil
	}
	c.g.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	return c.Conn.Close()
}

// unauthenticated is how many connections are held unauthenticated.
func (g *connGuard) unauthenticated() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unauth.Len()
}

type guardKey struct{}

// refuseConn stops reading the request's connection, after its refusal
// (a no-op for a handler mounted in another server).
func refuseConn(ctx context.Context) {
	if gc, ok := ctx.Value(guardKey{}).(*guardConn); ok {
		gc.refused.Store(true)
	}
}

// markAuthenticated tells the guard that the request's connection has
// authenticated (a no-op for a handler mounted in another server).
func markAuthenticated(ctx context.Context) {
	if gc, ok := ctx.Value(guardKey{}).(*guardConn); ok {
		gc.authenticated()
	}
}
