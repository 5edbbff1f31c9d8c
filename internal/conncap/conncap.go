// Package conncap bounds the connections a server holds before they
// authenticate, for outpost serve (package server) and the credential
// gateway (package gateway): a connection is pending from its accept until
// the server says a request on it authenticated (Conn.Authenticate). At
// most Options.MaxPending connections are pending at once: a new one
// closes the oldest, so idle or trickling clients (slowloris) cannot
// exhaust the server's connections, and a client that sends its request
// at once (every real one) always gets in. A pending connection may also
// have a deadline (Options.PendingTimeout), after which it is closed; and
// the authenticated connections may be bounded too (Options.MaxAuth:
// Authenticate fails beyond it). A leaf: the standard library only.
package conncap

import (
	"container/list"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Options are a Cap's bounds.
type Options struct {
	// MaxPending is how many connections may be pending at once (at least
	// 1): a new one beyond it closes the oldest pending one.
	MaxPending int
	// PendingTimeout, when positive, is how long a connection may stay
	// pending: it is closed then.
	PendingTimeout time.Duration
	// MaxAuth, when positive, is how many connections may be
	// authenticated at once: Authenticate fails beyond it.
	MaxAuth int
}

// Cap is the pending and authenticated connections of the listeners it
// wraps (one count over all of them).
type Cap struct {
	o Options

	mu      sync.Mutex
	pending list.List // *Conn, oldest first
	auth    int
	evicted int64
}

// New returns a Cap with o's bounds.
func New(o Options) *Cap {
	o.MaxPending = max(o.MaxPending, 1)
	return &Cap{o: o}
}

// Listen wraps l: the connections it accepts are *Conn, pending.
func (c *Cap) Listen(l net.Listener) net.Listener { return listener{Listener: l, c: c} }

type listener struct {
	net.Listener
	c *Cap
}

func (l listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.c.admit(nc), nil
}

// The states of a Conn, under its Cap's mu.
const (
	statePending = iota
	stateAuth
	stateClosed
)

// Conn is an accepted connection. Conn is the connection beneath, as
// accepted (a *net.UnixConn's peer credentials are read from it).
type Conn struct {
	net.Conn
	c     *Cap
	state int           // under c.mu
	elem  *list.Element // in c.pending while pending
	timer *time.Timer
	// refused: nothing more is read from it (Refuse).
	refused atomic.Bool
}

// ErrRefused is what Read returns once Refuse was called.
var ErrRefused = errors.New("the connection's request was refused")

// admit registers nc as pending, closing the oldest pending connection
// when MaxPending are.
func (c *Cap) admit(nc net.Conn) *Conn {
	cc := &Conn{Conn: nc, c: c}
	var oldest *Conn
	c.mu.Lock()
	if c.pending.Len() >= c.o.MaxPending {
		oldest = c.pending.Remove(c.pending.Front()).(*Conn)
		oldest.state, oldest.elem = stateClosed, nil
		c.evicted++
	}
	cc.elem = c.pending.PushBack(cc)
	if c.o.PendingTimeout > 0 {
		cc.timer = time.AfterFunc(c.o.PendingTimeout, cc.expire)
	}
	c.mu.Unlock()
	if oldest != nil {
		oldest.stopTimer()
		_ = oldest.Conn.Close()
	}
	return cc
}

func (cc *Conn) stopTimer() {
	if cc.timer != nil {
		cc.timer.Stop()
	}
}

// expire closes cc if it is still pending.
func (cc *Conn) expire() {
	cc.c.mu.Lock()
	still := cc.state == statePending
	if still {
		cc.c.pending.Remove(cc.elem)
		cc.state, cc.elem = stateClosed, nil
	}
	cc.c.mu.Unlock()
	if still {
		_ = cc.Conn.Close()
	}
}

// Authenticate moves cc from the pending connections to the
// authenticated ones, for good; it reports false (and cc stays as it was)
// when MaxAuth connections are authenticated already or cc was closed.
// Once authenticated, it returns true.
func (cc *Conn) Authenticate() bool {
	c := cc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case cc.state == stateAuth:
		return true
	case cc.state == stateClosed || (c.o.MaxAuth > 0 && c.auth >= c.o.MaxAuth):
		return false
	}
	c.pending.Remove(cc.elem)
	cc.state, cc.elem = stateAuth, nil
	c.auth++
	cc.stopTimer()
	return true
}

// Refuse stops reading cc: after a request's refusal, the http.Server
// would otherwise read on through up to 256 KiB of the refused body
// before it closes.
func (cc *Conn) Refuse() { cc.refused.Store(true) }

func (cc *Conn) Read(p []byte) (int, error) {
	if cc.refused.Load() {
		return 0, ErrRefused
	}
	return cc.Conn.Read(p)
}

// Close closes the connection and gives its place back.
func (cc *Conn) Close() error {
	c := cc.c
	c.mu.Lock()
	switch cc.state {
	case statePending:
		c.pending.Remove(cc.elem)
	case stateAuth:
		c.auth--
	}
	cc.state, cc.elem = stateClosed, nil
	c.mu.Unlock()
	cc.stopTimer()
	return cc.Conn.Close()
}

// CloseWrite half-closes the connection when the one beneath can (a
// CONNECT tunnel's client side), else closes it.
func (cc *Conn) CloseWrite() error {
	if cw, ok := cc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return cc.Close()
}

// Counts are a Cap's connections now: pending, authenticated, and how many
// pending ones were closed to make room since it was made.
func (c *Cap) Counts() (pending, auth int, evicted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending.Len(), c.auth, c.evicted
}
