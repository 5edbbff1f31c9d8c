package conncap_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/conncap"
)

// pair accepts one connection of l, dialled to it: the client's side and
// the server's (*conncap.Conn).
func pair(t *testing.T, l net.Listener) (client net.Conn, server *conncap.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s.(*conncap.Conn)
}

func listen(t *testing.T, o conncap.Options) (*conncap.Cap, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := conncap.New(o)
	return c, c.Listen(ln)
}

// closed reports whether the server closed client's connection (a read
// ends, with no guard deadline passing: the deadline is a guard against a
// hang, not a measurement).
func closed(t *testing.T, client net.Conn) bool {
	t.Helper()
	client.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := client.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether the server's side of a connection still
// carries bytes from client.
func stillOpen(t *testing.T, client net.Conn, server net.Conn) bool {
	t.Helper()
	if _, err := client.Write([]byte("x")); err != nil {
		return false
	}
	_, err := io.ReadFull(server, make([]byte, 1))
	return err == nil
}

// TestPendingCap: past MaxPending the oldest pending connection is
// closed; an authenticated one is not pending, whatever its age.
func TestPendingCap(t *testing.T) {
	c, l := listen(t, conncap.Options{MaxPending: 2})
	authClient, authServer := pair(t, l)
	if !authServer.Authenticate() || !authServer.Authenticate() {
		t.Fatal("Authenticate without MaxAuth failed")
	}
	first, _ := pair(t, l)
	second, secondServer := pair(t, l)
	pair(t, l) // closes first
	if !closed(t, first) {
		t.Fatal("the oldest pending connection was not closed past the cap")
	}
	if p, a, ev := c.Counts(); p != 2 || a != 1 || ev != 1 {
		t.Errorf("counts %d pending, %d authenticated, %d evicted; want 2, 1, 1", p, a, ev)
	}
	if !stillOpen(t, authClient, authServer) || !stillOpen(t, second, secondServer) {
		t.Error("the authenticated connection, or the newer pending one, was closed")
	}
	// A closed pending connection gives its place back: the next one
	// closes no one.
	secondServer.Close()
	pair(t, l)
	if _, _, ev := c.Counts(); ev != 1 {
		t.Errorf("%d evicted after a pending connection closed, want still 1", ev)
	}
}

// TestPendingTimeout: a connection still pending at PendingTimeout is
// closed; one authenticated before is not.
func TestPendingTimeout(t *testing.T) {
	_, l := listen(t, conncap.Options{MaxPending: 10, PendingTimeout: 50 * time.Millisecond})
	authClient, authServer := pair(t, l)
	authServer.Authenticate()
	pendingClient, _ := pair(t, l) // accepted later: its deadline is later
	if !closed(t, pendingClient) {
		t.Fatal("a pending connection outlived PendingTimeout")
	}
	if !stillOpen(t, authClient, authServer) {
		t.Error("an authenticated connection was closed at the pending deadline")
	}
}

// TestMaxAuth: Authenticate fails past MaxAuth, and succeeds again once
// an authenticated connection closed; Refuse stops reading.
func TestMaxAuth(t *testing.T) {
	c, l := listen(t, conncap.Options{MaxPending: 10, MaxAuth: 1})
	_, a := pair(t, l)
	_, b := pair(t, l)
	if !a.Authenticate() || b.Authenticate() {
		t.Fatal("want the first Authenticate to pass and the second refused at MaxAuth 1")
	}
	if p, n, _ := c.Counts(); p != 1 || n != 1 {
		t.Errorf("counts %d pending, %d authenticated; want 1, 1", p, n)
	}
	a.Close()
	if !b.Authenticate() {
		t.Error("Authenticate after the authenticated connection closed")
	}
	if a.Authenticate() {
		t.Error("a closed connection authenticated")
	}
	b.Refuse()
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, conncap.ErrRefused) {
		t.Errorf("Read after Refuse: %v", err)
	}
}
