package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// credentialHeaders are the request headers a CLI may put its key in:
// every one is removed before a call is forwarded.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"}

// call is what the model proxy's Rewrite needs of a checked request.
type call struct {
	route Route
	up    *url.URL
	path  string // the decoded path to append to the upstream's
	raw   string // the same, escaped as the client sent it
	bare  bool   // /_outpost/<i> without a slash: the base URL itself

	// What the reply's body did, read in the handler's goroutine.
	watched bool  // the upstream answered and its body is watched
	ended   bool  // the body was read to its end
	relayed int64 // bytes of the body read from the upstream
	upErr   error // the body's read error other than its end
}

// watchBody records how much of an upstream reply's body was read, and
// how its reading failed.
type watchBody struct {
	io.ReadCloser
	c *call
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.relayed += int64(n)
	switch {
	case err == io.EOF:
		b.c.ended = true
	case err != nil && b.c.upErr == nil:
		b.c.upErr = err
	}
	return n, err
}

type callKey struct{}

func isModelPath(p string) bool { return strings.HasPrefix(p, PathPrefix) }

// presented returns the tokens the request carries in its credential
// places (several when a CLI sends its key twice).
func presented(r *http.Request) []string {
	var out []string
	for _, h := range credentialHeaders {
		for _, v := range r.Header.Values(h) {
			if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
				v = strings.TrimSpace(rest)
			}
			out = append(out, v)
		}
	}
	for _, kv := range strings.Split(r.URL.RawQuery, "&") {
		if name, v, _ := strings.Cut(kv, "="); queryName(name) == "key" {
			if u, err := url.QueryUnescape(v); err == nil {
				out = append(out, u)
			}
		}
	}
	return out
}

func queryName(name string) string {
	if u, err := url.QueryUnescape(name); err == nil {
		return u
	}
	return name
}

// grantOf returns the live grant of the first live token the request
// carries, or nil.
func (g *Gateway) grantOf(r *http.Request) *Grant {
	for _, t := range presented(r) {
		if gr := g.lookup(t); gr != nil {
			return gr
		}
	}
	return nil
}

// splitModelPath splits /_outpost/<i>/<rest> (escaped as sent) into the
// route index and the rest, decoded and escaped. It refuses dot segments,
// encoded slashes, backslashes and NULs, bad escapes and invalid UTF-8, so
// the path can never leave the upstream's base path.
func splitModelPath(escaped string) (i int, c call, msg string) {
	rest, ok := strings.CutPrefix(escaped, PathPrefix)
	if !ok {
		return 0, c, "unknown path"
	}
	idx, raw, slash := strings.Cut(rest, "/")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || idx != strconv.Itoa(i) {
		return 0, c, "unknown route"
	}
	segs := strings.Split(raw, "/")
	for k, s := range segs {
		d, err := url.PathUnescape(s)
		switch {
		case err != nil:
			return 0, c, "malformed path"
		case d == "." || d == ".." || strings.ContainsAny(d, "/\\\x00"):
			return 0, c, "path escapes the route"
		case !utf8.ValidString(d):
			return 0, c, "path is not UTF-8"
		}
		segs[k] = d
	}
	return i, call{path: strings.Join(segs, "/"), raw: raw, bare: !slash}, ""
}

// modelCall checks and forwards one model call.
func (g *Gateway) modelCall(w http.ResponseWriter, r *http.Request) (*Grant, string) {
	if !isModelPath(r.URL.Path) {
		refuse(w, http.StatusNotFound, "unknown path")
		return nil, "-"
	}
	gr := g.grantOf(r)
	if gr == nil {
		refuse(w, http.StatusUnauthorized, "invalid or expired token")
		return nil, "-"
	}
	if !admit(w, r) {
		return gr, "-"
	}
	i, c, msg := splitModelPath(r.URL.EscapedPath())
	if msg == "unknown route" || (msg == "" && i >= len(gr.opts.Routes)) {
		refuse(w, http.StatusNotFound, "unknown route")
		return gr, "-"
	}
	if msg != "" {
		refuse(w, http.StatusBadRequest, msg)
		return gr, "-"
	}
	what := "route " + strconv.Itoa(i)
	if m := gr.opts.Meter; m != nil {
		if resp := m.Before(r, i); resp != nil {
			writeResponse(w, resp)
			return gr, what
		}
	}
	ctx, cancel := g.callContext(gr, r)
	defer cancel()
	c.route, c.up = gr.opts.Routes[i], gr.ups[i]
	ctx = context.WithValue(ctx, callKey{}, &c)
	ctx = context.WithValue(ctx, meterKey{}, meterAt{gr.opts.Meter, i, r})
	// Deferred after cancel, so it runs first (also when the proxy
	// aborts the handler on a broken body): ctx then says whether the
	// agent left or the grant ended before the upstream failed.
	defer g.reportCut(gr, i, &c, ctx, r.Context())
	g.model.ServeHTTP(w, r.WithContext(ctx))
	return gr, what
}

// reportCut logs a reply whose body did not reach its end: a warning when
// the upstream broke it off (the agent got a cut reply), a debug record
// when the agent left first (or could not be written to) or the grant
// ended.
func (g *Gateway) reportCut(gr *Grant, i int, c *call, ctx, client context.Context) {
	if !c.watched || c.ended {
		return
	}
	lg := gr.opts.Logger
	if lg == nil {
		lg = g.log
	}
	args := []any{"grant", gr.id, "route", i, "upstream", c.up.Host, "relayed_bytes", c.relayed}
	switch {
	case client.Err() != nil || c.upErr == nil:
		lg.Debug("gateway: the agent left before its reply ended", args...)
	case ctx.Err() != nil:
		lg.Debug("gateway: the grant ended before the reply did", args...)
	default:
		lg.Warn("gateway: the upstream broke off its reply; the agent got it cut", append(args, "error", redact(c.upErr.Error(), c.route.Secret))...)
	}
}

// callContext is the context of a model call's upstream request, and
// what ends it once the handler returns. A call ends when the agent
// goes, or the grant is revoked. A metered call goes on upstream when
// the agent leaves, also after the handler returned: its meter reads the
// abandoned reply on to its usage (bounded, gateway/meter), so that an
// agent cannot dodge its budget by hanging up; it ends with its grant.
func (g *Gateway) callContext(gr *Grant, r *http.Request) (context.Context, func()) {
	if gr.opts.Meter == nil {
		ctx, cancel := context.WithCancel(r.Context())
		stop := context.AfterFunc(gr.ctx, cancel)
		return ctx, func() { stop(); cancel() }
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	context.AfterFunc(gr.ctx, cancel)
	return ctx, func() {}
}

type meterKey struct{}

type meterAt struct {
	m Meter
	i int
	// r is the request Before saw: After is given the response with it
	// as its Request, so that a meter matches the two by r's context.
	r *http.Request
}

// modelProxy is the reverse proxy of model calls.
func (g *Gateway) modelProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     g.opts.Transport,
		FlushInterval: -1,
		BufferPool:    g.buffers,
		ErrorLog:      g.srv.ErrorLog,
		ModifyResponse: func(resp *http.Response) error {
			if at, _ := resp.Request.Context().Value(meterKey{}).(meterAt); at.m != nil {
				out := resp.Request
				resp.Request = at.r
				at.m.After(resp, at.i)
				resp.Request = out
			}
			if c, _ := resp.Request.Context().Value(callKey{}).(*call); c != nil && resp.Body != nil {
				c.watched = true
				resp.Body = &watchBody{ReadCloser: resp.Body, c: c}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c, _ := r.Context().Value(callKey{}).(*call)
			if c != nil {
				// The error may quote the upstream URL, whose query can
				// hold the secret: never log it unredacted.
				g.log.Debug("gateway: upstream failed", "upstream", c.up.Host, "error", redact(err.Error(), c.route.Secret))
			}
			if unreachable(err) && dropConnection(w) {
				return
			}
			refuse(w, http.StatusBadGateway, "upstream unreachable")
		},
	}
}

// unreachable reports whether err is a failure to connect to the
// upstream (refused, no route, a name that does not resolve, a dial
// timeout), not one of an exchange that began.
func unreachable(err error) bool {
	var oe *net.OpError
	var dns *net.DNSError
	return errors.As(err, &oe) && oe.Op == "dial" || errors.As(err, &dns)
}

// dropConnection closes the agent's connection without an answer, so
// that an upstream the gateway cannot reach looks to the agent as it
// would without the gateway (a connection error, which CLIs retry and
// outpost classifies as an outage), not as an HTTP 502 some CLIs give up
// on at once. It reports false when the connection cannot be taken over
// (HTTP/2).
func dropConnection(w http.ResponseWriter) bool {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// rewrite points the outgoing request at the route's upstream, with the
// real credential in place of every token.
func rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(callKey{}).(*call)
	out := pr.Out
	for _, h := range credentialHeaders {
		out.Header.Del(h)
	}
	base := strings.TrimSuffix(c.up.Path, "/")
	rawBase := strings.TrimSuffix(c.up.EscapedPath(), "/")
	u := &url.URL{Scheme: c.up.Scheme, Host: c.up.Host, Path: base + "/" + c.path, RawPath: rawBase + "/" + c.raw}
	if c.bare {
		u.Path, u.RawPath = c.up.Path, c.up.RawPath
	}
	q := withoutKey(out.URL.RawQuery)
	if c.up.RawQuery != "" {
		q = joinQuery(c.up.RawQuery, q)
	}
	switch c.route.Credential {
	case XAPIKey:
		out.Header.Set("X-Api-Key", c.route.Secret)
	case GoogAPIKey:
		out.Header.Set("X-Goog-Api-Key", c.route.Secret)
	case Bearer:
		out.Header.Set("Authorization", "Bearer "+c.route.Secret)
	case QueryKey:
		q = joinQuery(q, "key="+url.QueryEscape(c.route.Secret))
	}
	u.RawQuery = q
	out.URL = u
	out.Host = ""
}

// withoutKey drops every key parameter of a raw query, keeping the rest
// byte for byte.
func withoutKey(raw string) string {
	if raw == "" {
		return ""
	}
	kept := make([]string, 0, 4)
	for _, kv := range strings.Split(raw, "&") {
		if name, _, _ := strings.Cut(kv, "="); queryName(name) != "key" {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, "&")
}

func joinQuery(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "&" + b
}

// refuse writes the gateway's own error: a JSON body naming the problem,
// never a token or a secret.
func refuse(w http.ResponseWriter, code int, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": "outpost_gateway", "message": "outpost gateway: " + msg}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	if code == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Basic realm="outpost"`)
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// writeResponse writes a Meter's refusal.
func writeResponse(w http.ResponseWriter, resp *http.Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if resp.Body != nil {
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
	}
}

func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[secret]")
}
