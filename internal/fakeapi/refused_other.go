//go:build !unix

package fakeapi

import "net"

// RefusedAddr returns a loopback address (host:port) on which nothing
// listens. Here the port is only free a moment ago: another server could
// take it (the unix version holds it).
func RefusedAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
