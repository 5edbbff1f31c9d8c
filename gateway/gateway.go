// Package gateway is the credential gateway: a host-side reverse proxy
// that holds the real model-API credentials, so that a sandbox receives
// only the gateway's address and a random per-lease token in their place.
//
// A Gateway serves many leases. Each lease gets a Grant: a token and one
// Route per model endpoint of its preset (the real upstream and the real
// credential). The agent calls the gateway at Grant.BaseURL(addr, i) with
// the token where the CLI puts its key (x-api-key, Authorization: Bearer,
// x-goog-api-key or the key query parameter); the gateway accepts only a
// live grant's token, strips it, sets the real credential the way the
// upstream expects it, and forwards the request without buffering.
// Statuses, headers and bodies pass through unchanged. A wrong, revoked
// or other grant's token gets 401 without the upstream being contacted.
//
// The same gateway is the egress proxy of a grant (HTTP CONNECT and
// absolute-URI requests, with the token as the proxy password), reaching
// only the hosts of the grant's allowlist.
//
// The gateway listens on the host's loopback (Listen), for sandboxes that
// share it (local), and serves any other listener (Serve), such as a
// tunnel whose connections come from inside a sandbox (driver.Tunneler).
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
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
// Body to read usage as it streams. Both are called from the request's
// goroutine; route is the index of the grant's Route.
type Meter interface {
	Before(r *http.Request, route int) *http.Response
	After(resp *http.Response, route int)
}

// GrantOptions is what a lease is granted.
type GrantOptions struct {
	Routes []Route
	// Allow is the egress allowlist served as a proxy: "host",
	// "*.example.org" (any subdomain), each with an optional ":port".
	// Empty: the proxy refuses everything with 403.
	Allow []string
	// Meter, when set, sees every model call.
	Meter Meter
}

// Grant is one lease's access to the gateway. Revoke ends it.
type Grant struct {
	g     *Gateway
	token string
	opts  GrantOptions
}

// Token is the value the sandbox receives in place of every secret.
func (gr *Grant) Token() string { return gr.token }

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

// Revoke ends the grant: its token gets 401 from now on. Calling it
// again does nothing.
func (gr *Grant) Revoke() {
	gr.g.mu.Lock()
	defer gr.g.mu.Unlock()
	if gr.g.grants[gr.token] == gr {
		delete(gr.g.grants, gr.token)
	}
}

// Options configure a Gateway.
type Options struct {
	// Transport reaches the upstreams; default http.DefaultTransport.
	Transport http.RoundTripper
}

// Gateway is the proxy. It is safe for concurrent use.
type Gateway struct {
	opts   Options
	mu     sync.Mutex
	grants map[string]*Grant
	ln     net.Listener
	srv    *http.Server
}

// New returns a gateway with no grants that listens nowhere yet.
func New(o Options) *Gateway {
	g := &Gateway{opts: o, grants: map[string]*Grant{}}
	g.srv = &http.Server{Handler: g}
	return g
}

// Grant makes a grant with a fresh random token.
func (g *Gateway) Grant(o GrantOptions) (*Grant, error) {
	for i, r := range o.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("gateway: route %d: upstream is not an http(s) URL", i)
		}
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	gr := &Grant{g: g, token: "outpost-" + base64.RawURLEncoding.EncodeToString(b), opts: o}
	g.mu.Lock()
	g.grants[gr.token] = gr
	g.mu.Unlock()
	return gr, nil
}

// Listen makes the gateway listen on the host's loopback (once) and
// returns its address.
func (g *Gateway) Listen() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		g.ln = ln
		go g.srv.Serve(ln) //nolint:errcheck // ends with Close
	}
	return g.ln.Addr().String(), nil
}

// Serve serves l (a tunnel from a sandbox) until l is closed or the
// gateway is.
func (g *Gateway) Serve(l net.Listener) error {
	err := g.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops listening and serving and revokes every grant.
func (g *Gateway) Close() error {
	g.mu.Lock()
	clear(g.grants)
	g.mu.Unlock()
	return g.srv.Shutdown(context.Background())
}

// presented returns the token the request carries in any credential place.
func presented(r *http.Request) string {
	if v := r.Header.Get("x-api-key"); v != "" {
		return v
	}
	if v := r.Header.Get("x-goog-api-key"); v != "" {
		return v
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return v
	}
	return r.URL.Query().Get("key")
}

func (g *Gateway) lookup(token string) *Grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	for t, gr := range g.grants {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return gr
		}
	}
	return nil
}

// ServeHTTP forwards a model call of a live grant.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok {
		http.Error(w, "outpost gateway: unknown path", http.StatusNotFound)
		return
	}
	gr := g.lookup(presented(r))
	if gr == nil {
		http.Error(w, "outpost gateway: invalid or expired token", http.StatusUnauthorized)
		return
	}
	idx, tail, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= len(gr.opts.Routes) {
		http.Error(w, "outpost gateway: unknown route", http.StatusNotFound)
		return
	}
	route := gr.opts.Routes[i]
	up, _ := url.Parse(route.Upstream) // checked by Grant
	out := r.Clone(r.Context())
	out.Header.Del("x-api-key")
	out.Header.Del("x-goog-api-key")
	out.Header.Del("Authorization")
	q := out.URL.Query()
	q.Del("key")
	switch route.Credential {
	case XAPIKey, GoogAPIKey:
		out.Header.Set(string(route.Credential), route.Secret)
	case Bearer:
		out.Header.Set("Authorization", "Bearer "+route.Secret)
	case QueryKey:
		q.Set("key", route.Secret)
	}
	out.URL.Scheme, out.URL.Host = up.Scheme, up.Host
	out.URL.Path = strings.TrimSuffix(up.Path, "/") + "/" + tail
	out.URL.RawPath = ""
	out.URL.RawQuery = q.Encode()
	out.Host = up.Host
	out.RequestURI = ""
	transport := g.opts.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	resp, err := transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "outpost gateway: upstream unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
