package gateway

import (
	"bufio"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost/internal/testenv"
)

// secret is the real credential of every test route: it must never
// appear in a response, a log record or an error.
const secret = "sk-real-SECRET-0123456789abcdef"

// fixture is a gateway on loopback with a captured debug log that is
// scanned for the secret and every token at the test's end.
type fixture struct {
	t    *testing.T
	g    *Gateway
	addr string
	logs *testenv.LockedBuffer
	toks []string
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{t: t, logs: &testenv.LockedBuffer{}}
	o.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.g = New(o)
	addr, err := f.g.Listen()
	if err != nil {
		t.Fatal(err)
	}
	f.addr = addr
	t.Cleanup(func() {
		_ = f.g.Close()
		noLeak(t, "log", f.logs.String(), f.toks...)
	})
	return f
}

// grant makes a grant whose token is scanned for in the logs.
func (f *fixture) grant(o GrantOptions) *Grant {
	f.t.Helper()
	gr, err := f.g.Grant(o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.toks = append(f.toks, gr.Token())
	return gr
}

// noLeak fails when s holds the secret or a token.
func noLeak(t *testing.T, where, s string, tokens ...string) {
	t.Helper()
	if strings.Contains(s, secret) {
		t.Errorf("%s holds the secret: %q", where, s)
	}
	for _, tok := range tokens {
		if tok != "" && strings.Contains(s, tok) {
			t.Errorf("%s holds a token: %q", where, s)
		}
	}
}

// got is a response read whole.
type got struct {
	code   int
	header http.Header
	body   string
}

// read reads resp whole and checks its headers and body hold no secret.
func read(t *testing.T, resp *http.Response) got {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	var hdr strings.Builder
	_ = resp.Header.Write(&hdr)
	noLeak(t, "response header", hdr.String())
	noLeak(t, "response body", string(b))
	return got{resp.StatusCode, resp.Header, string(b)}
}

// do sends req with a client that uses no proxy.
func do(t *testing.T, req *http.Request) got {
	t.Helper()
	resp, err := noProxy.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return read(t, resp)
}

var noProxy = &http.Client{Transport: &http.Transport{Proxy: nil}}

// raw sends a request written by hand and reads the response.
func raw(t *testing.T, addr, request string) got {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", request, err)
	}
	return read(t, resp)
}

// upstream is a counting test upstream that records its requests.
type upstream struct {
	*httptest.Server
	n    atomic.Int64
	mu   sync.Mutex
	reqs []*http.Request
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.n.Add(1)
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(r.Context()))
		u.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return u.reqs[len(u.reqs)-1]
}

// tcpTarget is an egress target: a TCP server counting its connections,
// running serve on each.
type tcpTarget struct {
	ln       net.Listener
	accepted chan net.Conn
}

func newTCPTarget(t *testing.T, serve func(net.Conn)) *tcpTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tt := &tcpTarget{ln: ln, accepted: make(chan net.Conn, 100)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tt.accepted <- c
			if serve != nil {
				go serve(c)
			}
		}
	}()
	return tt
}

func (tt *tcpTarget) addr() string { return tt.ln.Addr().String() }

// dialedBy says whether anything but the test's own marker connection
// reached the target: it dials a marker and checks it is the first
// connection accepted (the listen backlog is in order).
func (tt *tcpTarget) dialedBefore(t *testing.T) bool {
	t.Helper()
	m, err := net.Dial("tcp", tt.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	first := <-tt.accepted
	return first.RemoteAddr().String() != m.LocalAddr().String()
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// dialConnect opens a CONNECT tunnel through the gateway, returning the
// connection and the proxy's response status.
func dialConnect(t *testing.T, addr, target, auth string) (net.Conn, *bufio.Reader, got) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK {
		return c, br, got{code: resp.StatusCode, header: resp.Header}
	}
	return c, br, read(t, resp)
}
