package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
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
