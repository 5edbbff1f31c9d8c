package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// A CONNECT to a host whose allowlist entries all have method or path
// rules is terminated: the gateway answers the sandbox's TLS handshake
// with a leaf of the grant's authority, reads each HTTP/1.1 request out of
// the tunnel, checks it (origin-form, its Host the CONNECT target, a
// rule that lets its method and path through) and forwards it over a
// TLS connection of its own to the target, verified against the system
// roots (Options.EgressRoots). Anything else in the tunnel (a CONNECT,
// an absolute URI, another Host, a TLS server name other than the
// target, HTTP/2, bytes that are not HTTP/1.1, a header over
// Options.MaxHeaderBytes) is refused there.

// tunnel is a terminated CONNECT's client connection: the hijacked
// connection, read through its buffered reader, with its grant, target
// and rules.
type tunnel struct {
	net.Conn
	r     io.Reader
	gr    *Grant
	t     target
	rules []allowEntry
	once  sync.Once
	done  chan struct{}
}

func (c *tunnel) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *tunnel) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

type tunnelKey struct{}

// tunnels hands terminated connections to the gateway's inner server.
type tunnels struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (q *tunnels) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *tunnels) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

func (q *tunnels) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (q *tunnels) push(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.closed:
		return false
	}
}

// innerServer is the HTTP/1.1 server of terminated tunnels (HTTP/2 off).
func (g *Gateway) innerServer() *http.Server {
	g.tunnels = &tunnels{ch: make(chan net.Conn), closed: make(chan struct{})}
	g.terminated = g.terminatedProxy()
	return &http.Server{
		Handler:           http.HandlerFunc(g.serveTerminated),
		MaxHeaderBytes:    g.opts.MaxHeaderBytes,
		ReadHeaderTimeout: g.opts.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:          g.srv.ErrorLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if tn, ok := tc.NetConn().(*tunnel); ok {
					return context.WithValue(ctx, tunnelKey{}, tn)
				}
			}
			return ctx
		},
	}
}

// intercept serves a CONNECT to a host with rules: 200, then the
// tunnel's TLS and requests served by the inner server until the client
// leaves or the grant ends.
func (g *Gateway) intercept(w http.ResponseWriter, gr *Grant, t target, rules []allowEntry) string {
	what := "connect " + t.addr() + " terminated"
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		refuse(w, http.StatusInternalServerError, "cannot tunnel on this connection")
		return what
	}
	if rec, ok := w.(*recorder); ok {
		rec.code = http.StatusOK
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		return what
	}
	tn := &tunnel{Conn: conn, r: brw.Reader, gr: gr, t: t, rules: rules, done: make(chan struct{})}
	tc := tls.Server(tn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !t.isServerName(hello.ServerName) {
				g.log.Debug("gateway: TLS server name is not the CONNECT target", "grant", gr.id, "target", t.addr())
				return nil, errors.New("gateway: the TLS server name is not the CONNECT target")
			}
			return gr.ca.leaf(t)
		},
	})
	g.innerOnce.Do(func() { go g.inner.Serve(g.tunnels) }) //nolint:errcheck // ends with Close
	stop := context.AfterFunc(gr.ctx, func() { _ = tn.Close() })
	defer stop()
	if !g.tunnels.push(tc) {
		_ = tn.Close()
	}
	<-tn.done
	return what
}

// serveTerminated serves one request read out of a terminated tunnel.
func (g *Gateway) serveTerminated(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	tn, ok := r.Context().Value(tunnelKey{}).(*tunnel)
	if !ok {
		refuse(rec, http.StatusInternalServerError, "not a tunnel")
		return
	}
	if msg, code := tn.check(r); msg != "" {
		refuse(rec, code, msg)
	} else {
		ctx, cancel := context.WithCancel(r.Context())
		stop := context.AfterFunc(tn.gr.ctx, cancel)
		g.terminated.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, targetKey{}, tn.t)))
		stop()
		cancel()
	}
	if g.opts.Logger == nil {
		return
	}
	g.log.LogAttrs(r.Context(), slog.LevelDebug, "gateway request",
		slog.String("grant", tn.gr.id), slog.String("method", r.Method), slog.String("target", "https "+tn.t.addr()),
		slog.Int("status", rec.status()), slog.Duration("duration", time.Since(start)))
}

// check refuses a request of a terminated tunnel that is not one to
// forward: its message and status, or "".
func (tn *tunnel) check(r *http.Request) (string, int) {
	switch {
	case tn.gr.ctx.Err() != nil:
		return "the grant has ended", http.StatusForbidden
	case r.Method == http.MethodConnect:
		return "a CONNECT inside a terminated tunnel is refused", http.StatusForbidden
	case r.URL.IsAbs() || len(r.RequestURI) == 0 || r.RequestURI[0] != '/':
		return "only origin-form requests (GET /path) are served inside a tunnel", http.StatusBadRequest
	}
	if h, ok := parseTarget(r.Host, 443); !ok || h != tn.t {
		return "the Host header is not the CONNECT target " + tn.t.addr(), http.StatusForbidden
	}
	if msg := ruleCheck(tn.rules, r.Method, r.URL.Path, r.URL.EscapedPath()); msg != "" {
		return msg, http.StatusForbidden
	}
	return "", 0
}

// terminatedProxy forwards the requests of terminated tunnels to their
// target over TLS of the gateway's own (dialTLS), HTTP/1.1.
func (g *Gateway) terminatedProxy() *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy:              nil,
		DialTLSContext:     g.dialTLS,
		MaxIdleConns:       64,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
		TLSNextProto:       map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	g.terminatedT = tr
	return g.proxyTo("https", tr, func(w http.ResponseWriter, err error) {
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			refuse(w, http.StatusBadGateway, "the target's certificate does not verify against the system roots")
			return
		}
		refuseDial(w, err)
	})
}

// dialTLS dials a terminated tunnel's target (dialTarget) and makes a
// TLS connection to it, verified against Options.EgressRoots (default
// the system roots).
func (g *Gateway) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	t, ok := parseTarget(addr, 443)
	if !ok {
		return nil, errInternal
	}
	c, err := g.dialTarget(ctx, t)
	if err != nil {
		return nil, err
	}
	name := t.name
	if name == "" {
		name = t.ip.String()
	}
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: g.opts.EgressRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}
