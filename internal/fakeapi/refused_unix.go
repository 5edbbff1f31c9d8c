//go:build unix

package fakeapi

import (
	"fmt"
	"sync"
	"syscall"
)

// refused keeps RefusedAddr's sockets open for the life of the process.
var refused struct {
	sync.Mutex
	fds []int
}

// RefusedAddr returns a loopback address (host:port) on which connections
// are refused, for "no server" tests. A TCP socket is bound to the port
// and never listens: the kernel answers a connection with a reset, and
// the socket stays open until the process ends, so that no server can
// take the port meanwhile. (Releasing a free port at once, as before, let
// a parallel test's fake take it: a "connection refused" turn was then
// answered by another test's fake model.)
func RefusedAddr() (string, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", fmt.Errorf("fakeapi: a socket for a refused port: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", fmt.Errorf("fakeapi: binding a refused port: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	in, ok := sa.(*syscall.SockaddrInet4)
	if err != nil || !ok {
		syscall.Close(fd)
		return "", fmt.Errorf("fakeapi: the refused port's address: %v", err)
	}
	refused.Lock()
	refused.fds = append(refused.fds, fd)
	refused.Unlock()
	return fmt.Sprintf("127.0.0.1:%d", in.Port), nil
}
