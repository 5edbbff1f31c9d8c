// Package gateway is the credential gateway: a host-side reverse proxy
// that holds the real model-API credentials, so that a sandbox receives
// only the gateway's address and a random per-lease token in their place.
//
// A Gateway serves many leases. Each lease gets a Grant: a token and one
// Route per model endpoint of its preset (the real upstream and the real
// credential). The agent calls the gateway at Grant.BaseURL(addr, i) with
// the token where the CLI puts its key (x-api-key, Authorization: Bearer,
// x-goog-api-key or the key query parameter); the gateway accepts only a
// live grant's token, strips it from every credential place, sets the real
// credential the way the upstream expects it, and forwards the request.
// Statuses, headers and bodies pass through unchanged, in both directions
// without buffering (a server-sent event reaches the agent as soon as the
// upstream sends it). A wrong, revoked or other grant's token gets 401
// without the upstream being contacted.
//
// Model calls go through net/http/httputil.ReverseProxy (Rewrite,
// FlushInterval -1, an ErrorHandler): it already removes the hop-by-hop
// headers of RFC 9110 in both directions, streams request and response
// bodies, keeps Content-Length and trailers right and propagates the
// client's cancellation to the upstream, which a hand-written copy would
// have to repeat. What is ours is the token check, the path and
// credential rewrite, the Meter, and ending the calls of a revoked grant.
// A response whose body breaks off mid-stream is aborted
// (http.ErrAbortHandler, recovered by net/http), so the agent sees a
// truncated stream rather than a clean end.
//
// The same gateway is the egress proxy of a grant (HTTP CONNECT and
// absolute-URI plain-HTTP requests, with the token as the password of
// Proxy-Authorization Basic, as Grant.ProxyURL gives), reaching only the
// hosts of the grant's allowlist, and for a host whose entries have
// method or path rules only the requests they allow (its TLS terminated
// with the grant's own certificate authority, intercept.go). Names are
// resolved on the host, and only once a name is on the list; a name is
// dialled at the addresses it resolved to, never at a loopback,
// link-local, private or the host's own one (an IP literal on the list is
// dialled as named); the gateway never dials itself.
//
// The gateway listens on the host's loopback (Listen), for sandboxes that
// share it (local), and serves any other listener (Serve), such as a
// tunnel whose connections come from inside a sandbox (driver.Tunneler).
// Every listener is bounded in connections (503 beyond), header size and
// the time to send the headers.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Credential is how an upstream expects its credential on a request.
type Credential string

const (
	// XAPIKey is the x-api-key header (Anthropic).
	XAPIKey Credential = "x-api-key"
	// Bearer is Authorization: Bearer (OpenAI and compatible APIs).
	Bearer Credential = "bearer"
	// GoogAPIKey is the x-goog-api-key header (Gemini).
	GoogAPIKey Credential = "x-goog-api-key"
	// QueryKey is the key query parameter (Gemini's alternative).
	QueryKey Credential = "query:key"
)

// PathPrefix starts the path of every model call through the gateway:
// /_outpost/<route index>/<the path the CLI appends to its base URL>.
const PathPrefix = "/_outpost/"

// ErrClosed is returned by Grant and Listen after Close.
var ErrClosed = errors.New("gateway: closed")

// Route is one model endpoint of a grant.
type Route struct {
	// Upstream is the real base URL; the path the CLI appends to the
	// gateway's base URL is appended to it.
	Upstream string
	// Secret is the real credential, set on every forwarded request.
	Secret string
	// Credential is how the upstream expects Secret.
	Credential Credential
}

// Meter sees every model call of a grant. Before may refuse a call (a
// budget) by returning the response to give the agent, in the upstream's
// own shape; the upstream is then not contacted. After receives the
// upstream's response before it is copied to the agent, and may wrap its
// Body to read usage as it streams (resp.Request is the request sent
// upstream: it carries the real credential). Both are called from the
// request's goroutine; route is the index of the grant's Route.
type Meter interface {
	Before(r *http.Request, route int) *http.Response
	After(resp *http.Response, route int)
}

// GrantOptions is what a lease is granted.
type GrantOptions struct {
	Routes []Route
	// Allow is the egress allowlist served as a proxy: "host",
	// "*.example.org" (any subdomain, not example.org itself), an IP
	// literal ("10.0.0.7", "[::1]"), each with an optional ":port"
	// (without one: 443 for CONNECT, 80 for plain HTTP). Names match
	// case-insensitively, a trailing dot ignored; IP literals match only
	// the same literal. Empty: the proxy refuses everything with 403.
	//
	// An entry may carry method and path rules after its host, separated
	// by spaces: "HOST [METHODS] [PATH...]" (rule.go), such as
	// "github.com GET,POST /org/repo.git/info/refs /org/repo.git/git-upload-pack".
	// A request to a host whose entries all have rules must pass one of
	// them, else 403 naming them. For such a host the gateway terminates
	// the CONNECT's TLS with a leaf of the grant's own certificate
	// authority (Grant.CACert, which the sandbox must trust) and forwards
	// each request over TLS of its own, verified against the system roots
	// (Options.EgressRoots); other hosts keep a plain tunnel.
	Allow []string
	// Meter, when set, sees every model call.
	Meter Meter
	// Logger, when set, receives the grant's records in place of the
	// gateway's Logger: a warning when an upstream breaks off a reply
	// (the agent sees its reply cut), a debug record when the agent
	// leaves before its reply ended. No record carries a token or a
	// secret.
	Logger *slog.Logger
}

// Grant is one lease's access to the gateway. Revoke ends it.
type Grant struct {
	g      *Gateway
	id     string
	token  string
	key    [sha256.Size]byte
	opts   GrantOptions
	ups    []*url.URL
	allow  []allowEntry
	ca     *authority      // the grant's certificate authority, when it has rules
	ctx    context.Context // ends with Revoke or the gateway's Close
	cancel context.CancelFunc
}

// Token is the value the sandbox receives in place of every secret.
func (gr *Grant) Token() string { return gr.token }

// ID names the grant in log records; it says nothing about the token.
func (gr *Grant) ID() string { return gr.id }

// BaseURL is the base URL the sandbox receives for route i, given the
// address ("127.0.0.1:40123") at which the gateway is reached from inside
// the sandbox.
func (gr *Grant) BaseURL(addr string, i int) string {
	return "http://" + addr + PathPrefix + strconv.Itoa(i)
}

// ProxyURL is the HTTP(S)_PROXY value for the grant's egress allowlist.
func (gr *Grant) ProxyURL(addr string) string {
	return "http://outpost:" + gr.token + "@" + addr
}

// Revoke ends the grant: its token gets 401 from now on, and its
// in-flight model calls and open CONNECT tunnels end. Calling it again
// does nothing.
func (gr *Grant) Revoke() {
	gr.g.mu.Lock()
	if gr.g.grants[gr.key] == gr {
		delete(gr.g.grants, gr.key)
	}
	gr.g.mu.Unlock()
	gr.cancel()
}

// Options configure a Gateway. The zero value is ready to use.
type Options struct {
	// Transport reaches the model upstreams. Default: a clone of
	// http.DefaultTransport (so the host's proxy variables apply) that
	// never asks for compression itself, so a response reaches the agent
	// encoded as the upstream sent it.
	Transport http.RoundTripper
	// Logger, when set, receives one debug record per request (grant id,
	// route or egress target, status, duration) and the gateway's errors.
	// No record carries a token or a secret.
	Logger *slog.Logger
	// MaxConns bounds the authenticated connections (those whose request
	// carried a live grant's token) served at once, per listener; beyond
	// it such a request gets 503 and its connection is closed. Default 512.
	MaxConns int
	// MaxPendingConns bounds the connections not yet authenticated, per
	// listener; a new connection beyond it closes the oldest of them.
	// Default 64.
	MaxPendingConns int
	// MaxHeaderBytes bounds a request's header; default 64 KiB (431 beyond).
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time to send a request's header;
	// default 10 s.
	ReadHeaderTimeout time.Duration
	// DialTimeout bounds dialling an egress target; default 30 s.
	DialTimeout time.Duration
	// Resolver resolves egress target names; default net.DefaultResolver
	// (the host's). A name is resolved on every dial and dialled only at
	// the addresses it resolved to that are not loopback, link-local,
	// private, carrier-grade NAT, unspecified or the host's own.
	Resolver Resolver
	// EgressRoots verify the certificates of the hosts whose TLS the
	// gateway terminates (those with method or path rules); default the
	// system's roots. Tests set a test CA's.
	EgressRoots *x509.CertPool
}

// Gateway is the proxy. It is safe for concurrent use.
type Gateway struct {
	opts     Options
	log      *slog.Logger // never nil: a discarding one when Options.Logger is
	ctx      context.Context
	cancel   context.CancelFunc
	srv      *http.Server
	model    *httputil.ReverseProxy
	egress   *httputil.ReverseProxy
	dialer   *net.Dialer
	resolver Resolver
	// reachInternal lets names be dialled at internal addresses: only
	// tests set it, to reach a loopback server by name.
	reachInternal bool
	buffers       *bufferPool
	own           *http.Transport // the model transport when New made it
	egressT       *http.Transport
	// inner serves the requests of terminated tunnels (intercept.go),
	// started on the first one.
	inner       *http.Server
	innerOnce   sync.Once
	tunnels     *tunnels
	terminated  *httputil.ReverseProxy
	terminatedT *http.Transport

	mu     sync.Mutex
	grants map[[sha256.Size]byte]*Grant
	ln     net.Listener
	self   map[string]bool // addresses the gateway listens on: never dialled
	closed bool
}

// New returns a gateway with no grants that listens nowhere yet.
func New(o Options) *Gateway {
	var own *http.Transport
	if o.Transport == nil {
		own = http.DefaultTransport.(*http.Transport).Clone()
		own.DisableCompression = true
		o.Transport = own
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 512
	}
	if o.MaxPendingConns <= 0 {
		o.MaxPendingConns = 64
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 30 * time.Second
	}
	g := &Gateway{opts: o, log: o.Logger, own: own, grants: map[[sha256.Size]byte]*Grant{}, self: map[string]bool{}}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.dialer = &net.Dialer{Timeout: o.DialTimeout, Control: g.refuseSelf}
	g.resolver = o.Resolver
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	g.srv = &http.Server{
		Handler:           g,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	g.srv.ErrorLog = g.errorLog()
	live.Store(g, struct{}{})
	g.buffers = &bufferPool{}
	g.model = g.modelProxy()
	g.egress = g.egressProxy()
	g.inner = g.innerServer()
	return g
}

// Grant makes a grant with a fresh random token.
func (g *Gateway) Grant(o GrantOptions) (*Grant, error) {
	o.Routes, o.Allow = slices.Clone(o.Routes), slices.Clone(o.Allow) // the caller's slices may change
	ups := make([]*url.URL, len(o.Routes))
	for i, r := range o.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("gateway: route %d: upstream is not an http(s) URL", i)
		}
		switch r.Credential {
		case XAPIKey, Bearer, GoogAPIKey, QueryKey:
		default:
			return nil, fmt.Errorf("gateway: route %d: unknown credential kind %q", i, r.Credential)
		}
		ups[i] = u
	}
	allow, err := parseAllow(o.Allow)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	b := make([]byte, 32+8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	gr := &Grant{
		g: g, opts: o, ups: ups, allow: allow,
		token: "outpost-" + base64.RawURLEncoding.EncodeToString(b[:32]),
		id:    "grant-" + hex.EncodeToString(b[32:]),
	}
	if slices.ContainsFunc(allow, allowEntry.restricted) {
		if gr.ca, err = newAuthority(gr.id, allow); err != nil {
			return nil, fmt.Errorf("gateway: the grant's certificate authority: %w", err)
		}
	}
	gr.key = sha256.Sum256([]byte(gr.token))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	gr.ctx, gr.cancel = context.WithCancel(g.ctx)
	g.grants[gr.key] = gr
	return gr, nil
}

// Listen makes the gateway listen on the host's loopback (once) and
// returns its address.
func (g *Gateway) Listen() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return "", ErrClosed
	}
	if g.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		g.ln = ln
		g.self[ln.Addr().String()] = true
		go g.srv.Serve(g.limit(ln)) //nolint:errcheck // ends with Close
	}
	return g.ln.Addr().String(), nil
}

// Serve serves l (a tunnel from a sandbox) until l is closed or the
// gateway is; it returns nil after Close.
func (g *Gateway) Serve(l net.Listener) error {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		g.mu.Lock()
		g.self[a.String()] = true
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.self, a.String())
			g.mu.Unlock()
		}()
	}
	err := g.srv.Serve(g.limit(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops listening and serving, revokes every grant and ends every
// request and tunnel in flight.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	clear(g.grants)
	g.mu.Unlock()
	live.Delete(g)
	g.cancel()
	err := g.srv.Close()
	_ = g.inner.Close()
	_ = g.tunnels.Close()
	g.egressT.CloseIdleConnections()
	g.terminatedT.CloseIdleConnections()
	if g.own != nil {
		g.own.CloseIdleConnections()
	}
	return err
}

// lookup returns the live grant of token, or nil: one map access by the
// token's SHA-256 and a constant-time comparison of the token itself.
func (g *Gateway) lookup(token string) *Grant {
	if token == "" {
		return nil
	}
	key := sha256.Sum256([]byte(token))
	g.mu.Lock()
	gr := g.grants[key]
	g.mu.Unlock()
	if gr == nil || subtle.ConstantTimeCompare([]byte(gr.token), []byte(token)) != 1 {
		return nil
	}
	return gr
}

// ServeHTTP serves one request: CONNECT and absolute-URI requests are
// egress (unless addressed to a model path), the rest model calls.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	var gr *Grant
	var what string
	switch {
	case r.Method == http.MethodConnect:
		gr, what = g.connect(rec, r)
	case r.URL.IsAbs() && !isModelPath(r.URL.Path):
		gr, what = g.forward(rec, r)
	default:
		gr, what = g.modelCall(rec, r)
	}
	if g.opts.Logger == nil {
		return
	}
	id := ""
	if gr != nil {
		id = gr.id
	}
	g.log.LogAttrs(r.Context(), slog.LevelDebug, "gateway request",
		slog.String("grant", id), slog.String("method", r.Method), slog.String("target", what),
		slog.Int("status", rec.status()), slog.Duration("duration", time.Since(start)))
}

// recorder remembers the status written, for the log record (none
// written: net/http's implicit 200).
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 && code >= 200 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
