//go:build unix

package fakeapi

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestRefusedAddr: a connection to the address is refused, and no server
// can take its port while the process lives (a parallel test's fake took
// a port released at once, and answered a "connection refused" turn).
func TestRefusedAddr(t *testing.T) {
	addr, err := RefusedAddr()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a server could listen on the refused address %s", addr)
	}
	other, err := RefusedAddr()
	if err != nil || other == addr {
		t.Fatalf("a second refused address: %q, %v (the first %q)", other, err, addr)
	}
}
