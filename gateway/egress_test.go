package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// echoUntilEOF reads everything the client sends, then answers with its
// length and closes: a tunnel that does not half-close never gets the answer.
func echoUntilEOF(c net.Conn) {
	defer c.Close()
	b, _ := io.ReadAll(c)
	fmt.Fprintf(c, "got %d bytes: %s", len(b), b)
}

// TestConnect: CONNECT reaches an allowed target through a tunnel that
// half-closes; anything else is refused without dialling.
func TestConnect(t *testing.T) {
	target := newTCPTarget(t, echoUntilEOF)
	f := newFixture(t, Options{})
	_, port, _ := net.SplitHostPort(target.addr())
	_, gwPort, _ := net.SplitHostPort(f.addr)
	gr := f.grant(GrantOptions{Allow: []string{"127.0.0.1:" + port, "*.example.org", f.addr, "localhost:" + gwPort}})
	other := f.grant(GrantOptions{Allow: []string{"api.example.com"}})
	auth := basic("outpost", gr.Token())
	t.Run("allowed", func(t *testing.T) {
		c, br, g := dialConnect(t, f.addr, target.addr(), auth)
		if g.code != 200 {
			t.Fatalf("got %d %q", g.code, g.body)
		}
		_, _ = io.WriteString(c, "hello")
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(br)
		if err != nil || string(b) != "got 5 bytes: hello" {
			t.Errorf("through the tunnel: %q, %v", b, err)
		}
		<-target.accepted
	})
	for _, tc := range []struct {
		name, target, auth string
		code               int
	}{
		{"no credentials", target.addr(), "", http.StatusProxyAuthRequired},
		{"wrong token", target.addr(), basic("outpost", "nope"), http.StatusProxyAuthRequired},
		{"not basic", target.addr(), "Bearer " + gr.Token(), http.StatusProxyAuthRequired},
		{"bad base64", target.addr(), "Basic !!!", http.StatusProxyAuthRequired},
		{"no colon", target.addr(), "Basic " + "b3V0cG9zdA==", http.StatusProxyAuthRequired},
		{"token as user", target.addr(), basic(gr.Token(), ""), http.StatusProxyAuthRequired},
		{"another grant's list", target.addr(), basic("outpost", other.Token()), http.StatusForbidden},
		{"off the list (port)", "127.0.0.1:1", auth, http.StatusForbidden},
		{"off the list (name)", "example.org:443", auth, http.StatusForbidden},
		{"the gateway itself", f.addr, auth, http.StatusForbidden},
		{"the gateway by name", "localhost:" + gwPort, auth, http.StatusForbidden},
		{"malformed target", "a b:443", auth, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, g := dialConnect(t, f.addr, tc.target, tc.auth)
			if g.code != tc.code {
				t.Errorf("got %d %q, want %d", g.code, g.body, tc.code)
			}
			if tc.code == http.StatusProxyAuthRequired && g.header.Get("Proxy-Authenticate") == "" {
				t.Error("407 without Proxy-Authenticate")
			}
		})
	}
	if target.dialedBefore(t) {
		t.Error("a refused CONNECT dialled the target")
	}
}

// TestConnectByName: a name on the list is resolved on the host; one
// that resolves to loopback (localhost, by the host's own resolver) is
// refused with 403 and not dialled, by CONNECT and by absolute URI.
func TestConnectByName(t *testing.T) {
	target := newTCPTarget(t, echoUntilEOF)
	f := newFixture(t, Options{})
	_, port, _ := net.SplitHostPort(target.addr())
	gr := f.grant(GrantOptions{Allow: []string{"LOCALHOST.:" + port}})
	auth := basic("outpost", gr.Token())
	if _, _, g := dialConnect(t, f.addr, "localhost:"+port, auth); g.code != http.StatusForbidden {
		t.Errorf("CONNECT localhost: %d %q, want 403", g.code, g.body)
	}
	if g := absolute(t, f.addr, "localhost:"+port, auth); g.code != http.StatusForbidden {
		t.Errorf("GET http://localhost/: %d %q, want 403", g.code, g.body)
	}
	if target.dialedBefore(t) {
		t.Error("localhost was dialled")
	}
}

// TestPlainHTTPProxy: an absolute-URI request is forwarded to an allowed
// host without the proxy credentials; others are refused without dialling.
func TestPlainHTTPProxy(t *testing.T) {
	up := newUpstream(t, nil)
	f := newFixture(t, Options{})
	host := strings.TrimPrefix(up.URL, "http://")
	gr := f.grant(GrantOptions{Allow: []string{host}})
	for _, tc := range []struct {
		name, url, auth string
		code            int
	}{
		{"allowed", up.URL + "/p?q=1", basic("outpost", gr.Token()), 200},
		{"no credentials", up.URL + "/p", "", http.StatusProxyAuthRequired},
		{"off the list", "http://127.0.0.1:1/p", basic("outpost", gr.Token()), http.StatusForbidden},
		{"default port 80", "http://127.0.0.1/p", basic("outpost", gr.Token()), http.StatusForbidden},
		{"https", "https://" + host + "/p", basic("outpost", gr.Token()), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := "GET " + tc.url + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
			if tc.auth != "" {
				req += "Proxy-Authorization: " + tc.auth + "\r\n"
			}
			g := raw(t, f.addr, req+"\r\n")
			if g.code != tc.code {
				t.Errorf("got %d %q, want %d", g.code, g.body, tc.code)
			}
		})
	}
	if n := up.n.Load(); n != 1 {
		t.Fatalf("the upstream received %d requests, want 1", n)
	}
	if r := up.last(t); r.Header.Get("Proxy-Authorization") != "" || r.URL.RawQuery != "q=1" {
		t.Errorf("forwarded %v %v", r.URL, r.Header)
	}
}

// TestProxiedModelCall: a client that sends everything to HTTP_PROXY
// still reaches the model routes (an absolute URI with the model path).
func TestProxiedModelCall(t *testing.T) {
	up := newUpstream(t, nil)
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	g := raw(t, f.addr, "GET "+gr.BaseURL(f.addr, 0)+"/v1/models HTTP/1.1\r\nHost: "+f.addr+
		"\r\nx-api-key: "+gr.Token()+"\r\nProxy-Authorization: "+basic("outpost", gr.Token())+"\r\nConnection: close\r\n\r\n")
	if g.code != 200 || up.last(t).Header.Get("x-api-key") != secret {
		t.Errorf("got %d %q", g.code, g.body)
	}
}

// TestRevoke: revoking a grant ends its tunnels and in-flight calls, and
// its token gets 401 and 407 afterwards; other grants go on.
func TestRevoke(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	target := newTCPTarget(t, func(c net.Conn) { <-hold; c.Close() })
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "event: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-hold:
		}
	})
	f := newFixture(t, Options{})
	o := GrantOptions{Allow: []string{target.addr()}, Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}}
	gr, keep := f.grant(o), f.grant(o)
	tunnel, tbr, g := dialConnect(t, f.addr, target.addr(), basic("outpost", gr.Token()))
	kept, kbr, g2 := dialConnect(t, f.addr, target.addr(), basic("outpost", keep.Token()))
	if g.code != 200 || g2.code != 200 {
		t.Fatalf("CONNECT: %d, %d", g.code, g2.code)
	}
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	resp, err := noProxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "event: one\n" {
		t.Fatalf("first line %q", line)
	}
	gr.Revoke()
	// Both end (a hang here is the failure).
	if _, err := io.ReadAll(br); err == nil {
		t.Error("the in-flight call ended cleanly, want an aborted stream")
	}
	_, _ = io.ReadAll(tbr)
	_ = tunnel
	// The other grant's tunnel is still up.
	if _, err := io.WriteString(kept, "x"); err != nil {
		t.Errorf("the other grant's tunnel: %v", err)
	}
	_ = kbr
	req, _ = http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	if g := do(t, req); g.code != http.StatusUnauthorized {
		t.Errorf("after Revoke: %d", g.code)
	}
	if _, _, g := dialConnect(t, f.addr, target.addr(), basic("outpost", gr.Token())); g.code != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT after Revoke: %d", g.code)
	}
}

// TestClose: Close ends Serve, tunnels and calls in flight.
func TestClose(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	target := newTCPTarget(t, func(c net.Conn) { <-hold; c.Close() })
	g := New(Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	gr, err := g.Grant(GrantOptions{Allow: []string{target.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	_, br, got := dialConnect(t, ln.Addr().String(), target.addr(), basic("outpost", gr.Token()))
	if got.code != 200 {
		t.Fatalf("CONNECT: %d", got.code)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
	if g.isSelf(ln.Addr().String()) {
		t.Error("the listener's address is still the gateway's after Serve returned")
	}
	_, _ = io.ReadAll(br) // hangs when the tunnel outlives Close
	if gr.ctx.Err() == nil {
		t.Error("the grant outlived Close")
	}
}

// TestConcurrentGrants: grants made, used and revoked at once (run with
// -race): every call of a live grant succeeds, every one after its
// Revoke gets 401.
func TestConcurrentGrants(t *testing.T) {
	up := newUpstream(t, nil)
	f := newFixture(t, Options{})
	errs := make(chan string, 64)
	done := make(chan struct{})
	for range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			gr, err := f.g.Grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: Bearer}}})
			if err != nil {
				errs <- err.Error()
				return
			}
			for i, want := range []int{200, 200, 401} {
				if i == 2 {
					gr.Revoke()
				}
				req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/chat/completions", strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+gr.Token())
				resp, err := noProxy.Do(req)
				if err != nil {
					errs <- err.Error()
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != want {
					errs <- fmt.Sprintf("call %d: %d, want %d", i, resp.StatusCode, want)
				}
			}
		}()
	}
	for range 16 {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := up.n.Load(); n != 32 {
		t.Errorf("the upstream received %d calls, want 32", n)
	}
}
