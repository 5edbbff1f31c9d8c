package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errSelf refuses a dial to the gateway's own address.
var errSelf = errors.New("gateway: refusing to dial the gateway itself")

// proxyGrant returns the grant whose token is the password of the
// request's Proxy-Authorization Basic, or nil.
func (g *Gateway) proxyGrant(r *http.Request) *Grant {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Proxy-Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return nil
	}
	_, pass, ok := strings.Cut(string(b), ":")
	if !ok {
		return nil
	}
	return g.lookup(pass)
}

// egressCheck authenticates an egress request and checks its target
// against the grant's allowlist, writing the refusal when it fails. rules
// are the entries with method or path rules a request to the target
// must pass (nil: any request).
func (g *Gateway) egressCheck(w http.ResponseWriter, r *http.Request, hostport string, def int) (gr *Grant, t target, rules []allowEntry, ok bool) {
	gr = g.proxyGrant(r)
	if gr == nil {
		refuse(w, http.StatusProxyAuthRequired, "proxy authentication required")
		return nil, t, nil, false
	}
	if !admit(w, r) {
		return gr, t, nil, false
	}
	if t, ok = parseTarget(hostport, def); !ok {
		refuse(w, http.StatusBadRequest, "malformed proxy target")
		return gr, t, nil, false
	}
	if ok, rules = match(gr.allow, t, def); !ok {
		refuse(w, http.StatusForbidden, "host not on the egress allowlist")
		return gr, t, nil, false
	}
	if g.isSelf(t.addr()) || isLocalAddr(r, t.addr()) {
		refuse(w, http.StatusForbidden, "refusing to proxy to the gateway itself")
		return gr, t, nil, false
	}
	return gr, t, rules, true
}

// connect serves CONNECT host:port: a tunnel to an allowed target that
// ends when either side is done, or the grant or the gateway ends.
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request) (*Grant, string) {
	gr, t, rules, ok := g.egressCheck(w, r, r.Host, 443)
	if !ok {
		return gr, "connect"
	}
	if rules != nil {
		return gr, g.intercept(w, gr, t, rules)
	}
	what := "connect " + t.addr()
	ctx, cancel := context.WithTimeout(gr.ctx, g.opts.DialTimeout)
	stop := context.AfterFunc(r.Context(), cancel)
	up, err := g.dialTarget(ctx, t)
	stop()
	cancel()
	if err != nil {
		g.log.Debug("gateway: egress dial failed", "grant", gr.id, "target", t.addr(), "error", err.Error())
		refuseDial(w, err)
		return gr, what
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		refuse(w, http.StatusInternalServerError, "cannot tunnel on this connection")
		return gr, what
	}
	if rec, ok := w.(*recorder); ok {
		rec.code = http.StatusOK
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		_ = up.Close()
		return gr, what
	}
	pipe(gr.ctx, conn, brw.Reader, up)
	return gr, what
}

// pipe copies both ways between the client (read through its buffered
// reader) and the upstream, half-closing each side when the other ends;
// it returns when both directions are done or ctx ends.
func pipe(ctx context.Context, client net.Conn, fromClient io.Reader, up net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = up.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	defer closeBoth()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, fromClient)
		closeWrite(up)
	}()
	_, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
}

// closeWrite half-closes c when it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// forward serves an absolute-URI plain-HTTP proxy request to an allowed
// host.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request) (*Grant, string) {
	if r.URL.Scheme != "http" {
		refuse(w, http.StatusBadRequest, "only http:// URLs are proxied; use CONNECT for https")
		return nil, "forward"
	}
	gr, t, rules, ok := g.egressCheck(w, r, r.URL.Host, 80)
	if !ok {
		return gr, "forward"
	}
	if rules != nil {
		if msg := ruleCheck(rules, r.Method, r.URL.Path, r.URL.EscapedPath()); msg != "" {
			refuse(w, http.StatusForbidden, msg)
			return gr, "forward " + t.addr()
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(gr.ctx, cancel)
	defer stop()
	ctx = context.WithValue(ctx, targetKey{}, t)
	g.egress.ServeHTTP(w, r.WithContext(ctx))
	return gr, "forward " + t.addr()
}

// targetKey holds the checked target of an absolute-URI request.
type targetKey struct{}

// refuseDial answers a failed egress dial: 403 for the gateway's own
// refusal (itself, or a name resolving only to internal addresses), 502
// for a target it could not reach.
func refuseDial(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errInternal):
		refuse(w, http.StatusForbidden, "the host resolves to a loopback, link-local, private or the host's own address; name it by its IP on the allowlist to reach it")
	case errors.Is(err, errSelf):
		refuse(w, http.StatusForbidden, "refusing to proxy to the gateway itself")
	default:
		refuse(w, http.StatusBadGateway, "cannot reach the target")
	}
}

// egressProxy forwards plain-HTTP proxy requests; it never uses a proxy
// of its own environment and never dials the gateway. The request goes
// to the target forward checked (its normalised host and port), dialled
// by dialTarget as a CONNECT's is.
func (g *Gateway) egressProxy() *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy:              nil,
		DialContext:        g.dialAddr,
		MaxIdleConns:       64,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	g.egressT = tr
	return g.proxyTo("http", tr, refuseDial)
}

// proxyTo is the reverse proxy of checked requests (the target in their
// context, targetKey) to scheme://target over tr; refuseFor answers a
// failed request.
func (g *Gateway) proxyTo(scheme string, tr *http.Transport, refuseFor func(http.ResponseWriter, error)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t, _ := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme, pr.Out.URL.Host = scheme, t.addr()
			pr.Out.Host = pr.In.Host
		},
		Transport:     tr,
		FlushInterval: -1,
		BufferPool:    g.buffers,
		ErrorLog:      g.srv.ErrorLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.log.Debug("gateway: egress failed", "target", r.URL.Host, "error", err.Error())
			refuseFor(w, err)
		},
	}
}

// refuseSelf is the dialer's Control: it refuses the addresses the
// gateway listens on, once a name is resolved.
func (g *Gateway) refuseSelf(_, address string, _ syscall.RawConn) error {
	if g.isSelf(address) {
		return errSelf
	}
	return nil
}

func (g *Gateway) isSelf(addr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.self[addr]
}

// isLocalAddr says whether addr is the local address the request came in
// on (a gateway reached through a listener it does not know the address of).
func isLocalAddr(r *http.Request, addr string) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && a.Network() == "tcp" && a.String() == addr
}
