package gateway

import (
	"net"
	"net/http"
	"sync"

	"github.com/outposthq/outpost/internal/conncap"
)

// limit bounds the connections of l served at once (internal/conncap,
// outpost serve's cap too). An authenticated connection (one that carried
// a live grant's token) counts against Options.MaxConns: beyond it, its
// request gets 503 and the connection closes. One not (yet)
// authenticated counts only against Options.MaxPendingConns: a new
// connection beyond it closes the oldest such one, so that idle or
// hostile unauthenticated connections never keep a turn's model calls
// out.
func (g *Gateway) limit(l net.Listener) net.Listener {
	return conncap.New(conncap.Options{MaxPending: g.opts.MaxPendingConns, MaxAuth: g.opts.MaxConns}).Listen(l)
}

type connKey struct{}

// admit counts the request's connection as authenticated (its request
// carried a live grant's token); when the gateway already serves
// Options.MaxConns such connections, it answers 503 and the connection
// closes.
func admit(w http.ResponseWriter, r *http.Request) bool {
	cc, ok := r.Context().Value(connKey{}).(*conncap.Conn)
	if !ok || cc.Authenticate() {
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
