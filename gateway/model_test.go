package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/gemini"
	"github.com/outposthq/outpost/internal/testenv"
)

// TestCredentialSwap: whichever place the CLI puts the token in, the
// upstream receives the real credential the route asks for, and no token.
func TestCredentialSwap(t *testing.T) {
	type seen struct{ XAPIKey, Goog, Auth, APIKey, Query string }
	for _, tc := range []struct {
		name  string
		cred  Credential
		place func(r *http.Request, tok string)
		query string // the query the CLI sends, TOKEN replaced
		want  seen
	}{
		{"x-api-key", XAPIKey, func(r *http.Request, tok string) { r.Header.Set("x-api-key", tok) }, "beta=true",
			seen{XAPIKey: secret, Query: "beta=true"}},
		{"bearer", Bearer, func(r *http.Request, tok string) { r.Header.Set("Authorization", "Bearer "+tok) }, "",
			seen{Auth: "Bearer " + secret}},
		{"goog header", GoogAPIKey, func(r *http.Request, tok string) { r.Header.Set("x-goog-api-key", tok) }, "alt=sse",
			seen{Goog: secret, Query: "alt=sse"}},
		{"query key", QueryKey, func(*http.Request, string) {}, "alt=sse&key=TOKEN&b=%2F%20",
			seen{Query: "alt=sse&b=%2F%20&key=" + secret}},
		{"token in every place", XAPIKey, func(r *http.Request, tok string) {
			r.Header.Set("x-api-key", tok)
			r.Header.Set("x-goog-api-key", tok)
			r.Header.Set("api-key", tok)
			r.Header.Set("Authorization", "bearer "+tok)
		}, "key=TOKEN", seen{XAPIKey: secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			f := newFixture(t, Options{})
			gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL + "/base/", Secret: secret, Credential: tc.cred}}})
			u := gr.BaseURL(f.addr, 0) + "/v1/models/gemini:stream"
			if tc.query != "" {
				u += "?" + strings.ReplaceAll(tc.query, "TOKEN", gr.Token())
			}
			req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"a":1}`))
			tc.place(req, gr.Token())
			if g := do(t, req); g.code != 200 || g.body != "ok" {
				t.Fatalf("got %d %q", g.code, g.body)
			}
			r := up.last(t)
			got := seen{r.Header.Get("x-api-key"), r.Header.Get("x-goog-api-key"), r.Header.Get("Authorization"), r.Header.Get("api-key"), r.URL.RawQuery}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("the upstream saw (-want +got):\n%s", d)
			}
			if r.URL.Path != "/base/v1/models/gemini:stream" {
				t.Errorf("upstream path %q", r.URL.Path)
			}
		})
	}
}

// TestRefusedTokens: a missing, wrong, revoked or other gateway's token
// gets 401 and the upstream sees nothing.
func TestRefusedTokens(t *testing.T) {
	up := newUpstream(t, nil)
	f := newFixture(t, Options{})
	routes := []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}
	live := f.grant(GrantOptions{Routes: routes})
	revoked := f.grant(GrantOptions{Routes: routes})
	revoked.Revoke()
	revoked.Revoke() // twice is fine
	other := New(Options{})
	t.Cleanup(func() { _ = other.Close() })
	foreign, err := other.Grant(GrantOptions{Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, token string }{
		{"none", ""},
		{"wrong", "outpost-wrong"},
		{"live token with a byte changed", live.Token()[:len(live.Token())-1] + "x"},
		{"revoked", revoked.Token()},
		{"another gateway's", foreign.Token()},
		{"the secret itself", secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, live.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
			req.Header.Set("x-api-key", tc.token)
			g := do(t, req)
			if g.code != http.StatusUnauthorized || !strings.Contains(g.body, "invalid or expired token") {
				t.Errorf("got %d %q, want 401", g.code, g.body)
			}
		})
	}
	if n := up.n.Load(); n != 0 {
		t.Errorf("the upstream received %d requests", n)
	}
}

// TestGrantsAreSeparate: a grant's token reaches its own routes only.
func TestGrantsAreSeparate(t *testing.T) {
	a, b := newUpstream(t, nil), newUpstream(t, nil)
	f := newFixture(t, Options{})
	ga := f.grant(GrantOptions{Routes: []Route{{Upstream: a.URL, Secret: secret, Credential: XAPIKey}}})
	gb := f.grant(GrantOptions{Routes: []Route{{Upstream: b.URL, Secret: "sk-b", Credential: XAPIKey}}})
	req, _ := http.NewRequest(http.MethodGet, ga.BaseURL(f.addr, 0)+"/x", nil)
	req.Header.Set("x-api-key", gb.Token())
	do(t, req)
	if a.n.Load() != 0 || b.n.Load() != 1 || b.last(t).Header.Get("x-api-key") != "sk-b" {
		t.Errorf("a got %d, b got %d requests", a.n.Load(), b.n.Load())
	}
}

// TestPathChecks: a path that would leave the upstream's base path, or
// names no route, gets a clear 4xx and the upstream sees nothing.
func TestPathChecks(t *testing.T) {
	up := newUpstream(t, nil)
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL + "/base", Secret: secret, Credential: XAPIKey}}})
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/_outpost/0/../x", 400, "path escapes the route"},
		{"/_outpost/0/v1/../../x", 400, "path escapes the route"},
		{"/_outpost/0/%2e%2e/x", 400, "path escapes the route"},
		{"/_outpost/0/%2E./x", 400, "path escapes the route"},
		{"/_outpost/0/a%2Fb", 400, "path escapes the route"},
		{"/_outpost/0/a%5Cb", 400, "path escapes the route"},
		{"/_outpost/0/a%00", 400, "path escapes the route"},
		{"/_outpost/0/./x", 400, "path escapes the route"},
		{"/_outpost/0/%ff%fe", 400, "path is not UTF-8"},
		{"/_outpost/1/v1", 404, "unknown route"},
		{"/_outpost/-1/v1", 404, "unknown route"},
		{"/_outpost/00/v1", 404, "unknown route"},
		{"/_outpost/x/v1", 404, "unknown route"},
		{"/_outpost/99999999999999999999/v1", 404, "unknown route"},
		{"/v1/messages", 404, "unknown path"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			g := raw(t, f.addr, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\nx-api-key: "+gr.Token()+"\r\nConnection: close\r\n\r\n")
			if g.code != tc.code || !strings.Contains(g.body, tc.msg) {
				t.Errorf("got %d %q, want %d %q", g.code, g.body, tc.code, tc.msg)
			}
		})
	}
	if n := up.n.Load(); n != 0 {
		t.Errorf("the upstream received %d requests", n)
	}
	// The paths that are fine reach the upstream where they should.
	for path, want := range map[string]string{
		"/_outpost/0":              "/base",
		"/_outpost/0/":             "/base/",
		"/_outpost/0/v1/a%20b/..c": "/base/v1/a%20b/..c",
		"/_outpost/0/v1//x":        "/base/v1//x",
	} {
		raw(t, f.addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\nx-api-key: "+gr.Token()+"\r\nConnection: close\r\n\r\n")
		if got := up.last(t).URL.EscapedPath(); got != want {
			t.Errorf("%s reached the upstream as %s, want %s", path, got, want)
		}
	}
}

// TestPassThrough: statuses, headers and bodies of the upstream reach the
// agent unchanged, the hop-by-hop headers dropped.
func TestPassThrough(t *testing.T) {
	for _, code := range []int{200, 400, 429, 500, 529} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			body := `{"type":"error","error":{"type":"overloaded_error"}}`
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.Header().Set("Request-Id", "req_1")
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Connection", "X-Hop")
				w.Header().Set("X-Hop", "dropped")
				w.Header().Set("Content-Length", "52")
				w.WriteHeader(code)
				_, _ = io.WriteString(w, body)
			})
			f := newFixture(t, Options{})
			gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
			req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
			req.Header.Set("x-api-key", gr.Token())
			req.Header.Set("Connection", "X-Req-Hop")
			req.Header.Set("X-Req-Hop", "dropped")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			g := do(t, req)
			want := map[string]string{"Retry-After": "7", "Request-Id": "req_1", "Content-Type": "application/json", "Content-Length": "52", "X-Hop": ""}
			for k, v := range want {
				if g.header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, g.header.Get(k), v)
				}
			}
			if g.code != code || g.body != body {
				t.Errorf("got %d %q", g.code, g.body)
			}
			r := up.last(t)
			if r.Header.Get("X-Req-Hop") != "" || r.Header.Get("Anthropic-Version") != "2023-06-01" {
				t.Errorf("upstream request header %v", r.Header)
			}
		})
	}
}

// TestStreamsWithoutBuffering: the upstream reads the first part of the
// request body while the agent has not finished sending it, and the agent
// reads the first event while the upstream has not finished.
func TestStreamsWithoutBuffering(t *testing.T) {
	firstIn := make(chan string)
	finish := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 6)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("upstream reading: %v", err)
		}
		firstIn <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: one\ndata: "+string(rest)+"\n\n")
		w.(http.Flusher).Flush()
		<-finish
		_, _ = io.WriteString(w, "event: two\n\n")
	})
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: Bearer}}})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/responses", pr)
	req.Header.Set("Authorization", "Bearer "+gr.Token())
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := noProxy.Do(req)
		if err != nil {
			t.Errorf("request: %v", err)
		}
		respc <- resp
	}()
	_, _ = io.WriteString(pw, "first:")
	if got := <-firstIn; got != "first:" {
		t.Fatalf("upstream read %q", got)
	}
	_, _ = io.WriteString(pw, "rest")
	_ = pw.Close()
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var first string
	for range 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first event: %v", err)
		}
		first += line
	}
	if first != "event: one\ndata: rest\n\n" {
		t.Fatalf("first event %q", first)
	}
	close(finish)
	rest, _ := io.ReadAll(br)
	if string(rest) != "event: two\n\n" {
		t.Errorf("rest %q", rest)
	}
}

// TestFakeAnthropic: the fake Messages API streams a whole reply through
// the gateway and sees only the real key.
func TestFakeAnthropic(t *testing.T) {
	fake := anthropic.New(t, anthropic.Options{})
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: fake.URL(), Secret: secret, Credential: XAPIKey}}})
	body := `{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages?beta=true", strings.NewReader(body))
	req.Header.Set("x-api-key", gr.Token())
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	g := do(t, req)
	if g.code != 200 || !strings.Contains(g.body, "message_stop") || !strings.Contains(g.body, "Hello") {
		t.Fatalf("got %d %q", g.code, g.body)
	}
	reqs := fake.MessageRequests()
	if len(reqs) != 1 || reqs[0].APIKey != secret || reqs[0].RawQuery != "beta=true" {
		t.Errorf("the fake saw %+v", reqs)
	}
}

// TestCancelPropagates: an agent that goes away cancels the upstream call.
func TestCancelPropagates(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(ended)
	})
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	resp, err := noProxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	_ = resp.Body.Close()
	<-ended // hangs (test timeout) when the cancellation is not propagated
}

// TestUpstreamUnreachable: an upstream that refuses the connection looks
// to the agent as it would without the gateway: its connection closes
// without an answer (CLIs retry that; some give up on a 502 at once).
// The failure is logged, naming no secret even when the secret is in the
// upstream URL's query.
func TestUpstreamUnreachable(t *testing.T) {
	dead, err := fakeapi.RefusedAddr()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: "http://" + dead + "/v1beta", Secret: secret, Credential: QueryKey}}})
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/models/x?key="+gr.Token(), strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the connection closed without an answer", resp.StatusCode)
	}
	if !strings.Contains(f.logs.String(), "upstream failed") {
		t.Errorf("no log record of the failure: %s", f.logs)
	}
	noLeak(t, "log", f.logs.String())
}

// meter refuses calls when refuse is set, and counts response bytes.
type meter struct {
	refuse bool
	before int
	bytes  *int
	seen   *http.Request // the request Before saw
	same   bool          // After's response carried it
}

func (m *meter) Before(r *http.Request, route int) *http.Response {
	m.before++
	m.seen = r
	if !m.refuse {
		return nil
	}
	return &http.Response{StatusCode: 429, Header: http.Header{"X-Budget": {"spent"}},
		Body: io.NopCloser(strings.NewReader(`{"error":"budget"}`))}
}

func (m *meter) After(resp *http.Response, route int) {
	m.same = resp.Request == m.seen
	resp.Body = &countingBody{ReadCloser: resp.Body, n: m.bytes}
}

type countingBody struct {
	io.ReadCloser
	n *int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	*c.n += n
	return n, err
}

// TestMeter: Before may refuse without the upstream being contacted;
// After sees the response body as it streams.
func TestMeter(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "twelve bytes") })
	f := newFixture(t, Options{})
	var n int
	refusing := &meter{refuse: true, bytes: &n}
	gr := f.grant(GrantOptions{Meter: refusing, Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	g := do(t, req)
	if g.code != 429 || g.body != `{"error":"budget"}` || g.header.Get("X-Budget") != "spent" || up.n.Load() != 0 {
		t.Errorf("refused: got %d %q, upstream %d", g.code, g.body, up.n.Load())
	}
	counting := &meter{bytes: &n}
	gr2 := f.grant(GrantOptions{Meter: counting, Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	req, _ = http.NewRequest(http.MethodPost, gr2.BaseURL(f.addr, 0)+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr2.Token())
	g = do(t, req)
	if g.code != 200 || g.body != "twelve bytes" || n != 12 || counting.before != 1 {
		t.Errorf("metered: got %d %q, counted %d bytes, before %d", g.code, g.body, n, counting.before)
	}
	if !counting.same {
		t.Error("After's response does not carry the request Before saw (a meter matches the two by its context)")
	}
}

// TestGrantChecks: Grant refuses bad routes and allowlists with errors
// that quote no secret.
func TestGrantChecks(t *testing.T) {
	g := New(Options{})
	for name, o := range map[string]GrantOptions{
		"not a URL":       {Routes: []Route{{Upstream: "::" + secret, Secret: secret, Credential: XAPIKey}}},
		"no scheme":       {Routes: []Route{{Upstream: "api.example.com", Secret: secret, Credential: XAPIKey}}},
		"ftp":             {Routes: []Route{{Upstream: "ftp://x/", Secret: secret, Credential: XAPIKey}}},
		"credential kind": {Routes: []Route{{Upstream: "https://x/", Secret: secret, Credential: "cookie"}}},
		"allow entry":     {Allow: []string{"a b"}},
	} {
		if _, err := g.Grant(o); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			noLeak(t, name, err.Error())
		}
	}
	_ = g.Close()
	if _, err := g.Grant(GrantOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Grant after Close: %v", err)
	}
	if _, err := g.Listen(); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close: %v", err)
	}
}

// quotingTransport fails with an error that quotes the request's URL, as
// a transport may.
type quotingTransport struct{}

func (quotingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, errors.New("cannot reach " + r.URL.String())
}

// TestUpstreamErrorRedacted: an upstream error that quotes the URL (and
// so the key query parameter) is logged without the secret.
func TestUpstreamErrorRedacted(t *testing.T) {
	f := newFixture(t, Options{Transport: quotingTransport{}})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: "http://upstream.invalid/v1beta", Secret: secret, Credential: QueryKey}}})
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/models/x?key="+gr.Token(), strings.NewReader("{}"))
	if g := do(t, req); g.code != http.StatusBadGateway {
		t.Errorf("got %d %q", g.code, g.body)
	}
	if !strings.Contains(f.logs.String(), "key=[secret]") {
		t.Errorf("the log does not hold the redacted error: %s", f.logs)
	}
}

// TestEncodingUnchanged: the gateway asks for no compression the agent
// did not ask for, and passes an encoded body through still encoded.
func TestEncodingUnchanged(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("X-Asked", r.Header.Get("Accept-Encoding"))
		_, _ = io.WriteString(w, "not really gzip")
	})
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}}})
	g := raw(t, f.addr, "GET /_outpost/0/x HTTP/1.1\r\nHost: x\r\nx-api-key: "+gr.Token()+"\r\nConnection: close\r\n\r\n")
	if g.code != 200 || g.header.Get("X-Asked") != "" || g.header.Get("Content-Encoding") != "gzip" || g.body != "not really gzip" {
		t.Errorf("got %d %v %q", g.code, g.header, g.body)
	}
}

// TestFakeGemini: the fake Gemini API streams a reply through the gateway
// with the key in the query, as the route asks, whichever place the CLI
// put the token in.
func TestFakeGemini(t *testing.T) {
	fake := gemini.Start(t, gemini.Config{})
	f := newFixture(t, Options{})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: fake.URL(), Secret: secret, Credential: QueryKey}}})
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", strings.NewReader(body))
	req.Header.Set("x-goog-api-key", gr.Token())
	req.Header.Set("content-type", "application/json")
	g := do(t, req)
	if g.code != 200 || !strings.Contains(g.body, "data: ") {
		t.Fatalf("got %d %q", g.code, g.body)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].APIKey() != secret || reqs[0].Header.Get("x-goog-api-key") != "" || !reqs[0].Stream {
		t.Errorf("the fake saw %+v", reqs)
	}
}

// TestCutReplyReported: an upstream that breaks off a streamed reply
// gives the agent a cut reply (a read error, not a clean end) and the
// grant's logger a warning naming the route and the bytes relayed, never
// the secret; an agent that leaves mid-reply is no warning.
func TestCutReplyReported(t *testing.T) {
	leave := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/v1/wait" {
			select {
			case <-r.Context().Done():
			case <-leave:
			}
			return
		}
		panic(http.ErrAbortHandler) // the connection closes mid-body
	})
	f := newFixture(t, Options{})
	var grantLog testenv.LockedBuffer
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: up.URL, Secret: secret, Credential: XAPIKey}},
		Logger: slog.New(slog.NewTextHandler(&grantLog, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	req, _ := http.NewRequest(http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/cut", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	resp, err := noProxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(b) != "data: {\"n\":1}\n\n" {
		t.Errorf("the agent read %q, %v: want the first event, then a read error", b, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, gr.BaseURL(f.addr, 0)+"/v1/wait", strings.NewReader("{}"))
	req.Header.Set("x-api-key", gr.Token())
	if resp, err = noProxy.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	defer close(leave)

	logs := func() string { return grantLog.String() }
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs(), "agent left") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	warns := strings.Count(logs(), "level=WARN")
	if warns != 1 || !strings.Contains(logs(), "broke off its reply") || !strings.Contains(logs(), "relayed_bytes=15") ||
		!strings.Contains(logs(), "route=0") || !strings.Contains(logs(), "the agent left before its reply ended") {
		t.Errorf("grant log, want one warning for the cut and a debug record for the agent that left:\n%s", logs())
	}
	noLeak(t, "grant log", logs(), gr.Token())
	if strings.Contains(f.logs.String(), "broke off") {
		t.Errorf("the gateway's own log has the grant's records:\n%s", f.logs.String())
	}
}
