package gateway

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// busyBody is the body of what a connection beyond the bound gets.
const busyBody = `{"error":{"type":"outpost_gateway","message":"outpost gateway: too many connections"}}` + "\n"

var busyResponse = []byte("HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
	strconv.Itoa(len(busyBody)) + "\r\n\r\n" + busyBody)

// limit bounds the connections of l served at once to Options.MaxConns;
// one beyond gets 503 and is closed without a request being read.
func (g *Gateway) limit(l net.Listener) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, g.opts.MaxConns)}
}

type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			go busy(c)
		}
	}
}

// busy answers 503 and closes c; it reads what the client sent first
// (for a second at most), so that closing does not reset the connection
// before the client has read the answer.
func busy(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(busyResponse)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	_ = c.Close()
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
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
