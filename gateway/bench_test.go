package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// benchUpstream answers a small POST with a short SSE stream, flushed per
// event, like a model API's streamed reply.
func benchUpstream(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{"message_start", "content_block_delta", "content_block_delta", "message_stop"} {
			_, _ = io.WriteString(w, "event: "+ev+"\ndata: {\"type\":\""+ev+"\"}\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

const benchBody = `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func benchCalls(b *testing.B, url, key string) {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
		req.Header.Set("x-api-key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || n == 0 {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
}

// BenchmarkDirect: a small POST with an SSE reply, straight to a loopback
// upstream.
func BenchmarkDirect(b *testing.B) {
	up := benchUpstream(b)
	benchCalls(b, up.URL+"/v1/messages", secret)
}

// BenchmarkThroughGateway: the same through the gateway on loopback (one
// more hop, the token check and the credential swap).
func BenchmarkThroughGateway(b *testing.B) {
	up := benchUpstream(b)
	g := New(Options{})
	b.Cleanup(func() { _ = g.Close() })
	addr, err := g.Listen()
	if err != nil {
		b.Fatal(err)
	}
	gr, err := g.Grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	if err != nil {
		b.Fatal(err)
	}
	benchCalls(b, gr.BaseURL(addr, 0)+"/v1/messages", gr.Token())
}

// BenchmarkEgressHTTPS: a small GET to an HTTPS upstream through the
// egress proxy, over a plain CONNECT tunnel (a host without rules) and
// over a terminated one (a host with method/path rules: the gateway's TLS
// to the client, the request checked, the gateway's own TLS upstream);
// kept-alive connections, and a new connection per request (the
// handshakes: the client's to the gateway with a cached leaf, and the
// gateway's pooled one upstream).
func BenchmarkEgressHTTPS(b *testing.B) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	g := New(Options{Resolver: staticResolver{}, EgressRoots: roots})
	g.reachInternal = true
	b.Cleanup(func() { _ = g.Close() })
	addr, err := g.Listen()
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct{ name, entry string }{{"tunnel", "example.com:" + port}, {"terminated", "example.com:" + port + " GET /a"}} {
		gr, err := g.Grant(GrantOptions{Allow: []string{mode.entry}})
		if err != nil {
			b.Fatal(err)
		}
		pool := roots
		if ca := gr.CACert(); ca != nil {
			pool = x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
		}
		proxy, _ := url.Parse(gr.ProxyURL(addr))
		for _, keep := range []bool{true, false} {
			name := mode.name + "/keepalive"
			if !keep {
				name = mode.name + "/newconn"
			}
			b.Run(name, func(b *testing.B) {
				c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: !keep}}
				b.ReportAllocs()
				for b.Loop() {
					resp, err := c.Get("https://example.com:" + port + "/a")
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	}
}

// staticResolver resolves every name to 127.0.0.1.
type staticResolver struct{}

func (staticResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}
