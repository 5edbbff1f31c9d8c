package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/server"
)

// closedByServer reads c to its end and reports whether the server
// closed it (rather than the guard deadline passing: a guard against a
// hang, not a measurement).
func closedByServer(t *testing.T, c net.Conn) (string, bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	return string(b), !(errors.As(err, &ne) && ne.Timeout())
}

// TestUnauthenticatedConnections: idle and trickling clients that never
// authenticate cannot exhaust serve (issue 43: a partial unauthenticated
// body was held for 60 s, with no cap on such connections). Past
// MaxUnauthConns the oldest unauthenticated connection is closed, so an
// authenticated client still gets in; a refused request's body is not
// read on; and an authenticated connection is not touched.
func TestUnauthenticatedConnections(t *testing.T) {
	const idle, max = 300, 64
	// The http.Server's own header and body timeouts are out of the way:
	// only the guard bounds unauthenticated connections here.
	addr, token := guarded(t, func(o *server.Options) { o.MaxUnauthConns = max; o.AuthTimeout = time.Hour })
	// An authenticated keep-alive connection, made first: the oldest.
	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	br := bufio.NewReader(authed)
	get := func() (int, error) {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	req := "GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n\r\n"
	io.WriteString(authed, req)
	if st, err := get(); err != nil || st != 200 {
		t.Fatalf("authenticated request: %d %v", st, err)
	}
	var conns []net.Conn
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /v1/agents HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		conns = append(conns, c)
	}
	// A new client authenticates and is served.
	hreq, _ := http.NewRequest("GET", "http://"+addr+"/v1/agents", nil)
	hreq.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an authenticated client after %d idle connections: %v %v", idle, resp, err)
	}
	resp.Body.Close()
	// The oldest idle ones were closed to make room.
	for i, c := range conns[:idle-max-4] {
		if _, closed := closedByServer(t, c); !closed {
			t.Fatalf("idle connection %d of %d is still held past the cap of %d", i, idle, max)
		}
	}
	// The authenticated connection, older than all, still works.
	io.WriteString(authed, req)
	if st, err := get(); err != nil || st != 200 {
		t.Fatalf("the authenticated connection after the flood: %d %v", st, err)
	}
	// A refused request's partial body is not waited for.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/turns HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"prompt\":")
	out, closed := closedByServer(t, c)
	if !closed || !strings.Contains(out, " 401 ") {
		t.Fatalf("an unauthenticated partial body: closed %v, answer %q", closed, out)
	}
}

// guarded is start with the http.Server's header and body timeouts at an
// hour (only the guard bounds unauthenticated connections), returning its
// address and token.
func guarded(t *testing.T, mod func(*server.Options)) (addr, token string) {
	t.Helper()
	ts := startHTTP(t, mod, func(hs *http.Server) { hs.ReadHeaderTimeout, hs.ReadTimeout = time.Hour, time.Hour })
	return strings.TrimPrefix(ts.url, "http://"), ts.token
}

// TestAuthTimeout: a connection that has not authenticated within
// AuthTimeout is closed, whatever the http.Server's own timeouts.
func TestAuthTimeout(t *testing.T) {
	addr, _ := guarded(t, func(o *server.Options) { o.AuthTimeout = 100 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	if _, closed := closedByServer(t, c); !closed {
		t.Fatal("an unauthenticated connection outlived AuthTimeout")
	}
}
