// Package inside is the sandbox's side of a tunnel (providers/tunnel):
// the exec shim's tunnel mode (Serve), which listens on 127.0.0.1:0
// inside the sandbox, writes the address on its first line of stdout,
// and carries every connection it accepts to the host as a yamux stream
// over its stdin and stdout; and its dial mode (Dial), a small client for
// tests. It imports neither the driver contract nor anything of the
// host's, as the shim does not.
package inside

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Mode is the exec shim's mode that runs Serve; DialMode the one that runs
// Dial.
const (
	Mode     = "tunnel"
	DialMode = "dial"
)

// Config is yamux's configuration on both sides: no logging (the host's
// side must not write to the caller's stderr; the sandbox's has nothing
// to say that its exit does not), keep-alives on so that a stream that
// stopped moving is noticed, and PingTimeout for a ping's answer.
func Config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = PingTimeout
	return c
}

// PingTimeout is how long a keep-alive ping (and a frame's wait to be
// sent) may take before the tunnel ends: a minute, as the serving
// connection's writes (shim.MuxConfig). yamux's default, 10 s, is the
// round trip a loaded machine can exceed: a ping and its answer cross
// the provider's exec stream (kubernetes: the API server, the kubelet,
// the serving exec's shim) behind the data of every connection, and a
// late answer ended a healthy tunnel (its end in the sandbox saw its
// stdin close and exited 0; a connection through it was reset).
const PingTimeout = time.Minute

// Stdio is one side's standard streams as the connection yamux runs
// over. Close (CloseFunc, when set) closes the writing side only: the
// peer sees the end of its input and ends too.
type Stdio struct {
	io.Reader
	io.Writer
	CloseFunc func() error
}

func (s Stdio) Close() error {
	if s.CloseFunc == nil {
		return nil
	}
	return s.CloseFunc()
}

// Serve is the sandbox's side of a tunnel: it listens on 127.0.0.1:0,
// writes the address on its first line of stdout, then carries every
// connection it accepts to the host as a yamux stream over stdin and
// stdout, until stdin ends (the host closed the tunnel). It returns the
// exit status: 0 once the host ended the tunnel, 1 when it could not
// start.
func Serve(stdin io.Reader, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(stderr, "outpost tunnel: listening on the sandbox's loopback: %v\n", err)
		return 1
	}
	defer ln.Close()
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		return 1
	}
	sess, err := yamux.Client(Stdio{Reader: stdin, Writer: stdout}, Config())
	if err != nil {
		fmt.Fprintf(stderr, "outpost tunnel: %v\n", err)
		return 1
	}
	defer sess.Close()
	go func() {
		<-sess.CloseChan()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0 // the listener closes with the session
		}
		go func() {
			st, err := sess.OpenStream()
			if err != nil {
				c.Close()
				return
			}
			Pipe(c, st)
		}()
	}
}

// halfCloser is a connection whose writing side closes on its own
// (*net.TCPConn; a yamux stream's Close is one).
type halfCloser interface {
	CloseWrite() error
}

// closeWrite ends c's writing side: CloseWrite where c has one, else
// Close (a yamux stream's Close sends its end and still reads).
func closeWrite(c io.Closer) {
	if h, ok := c.(halfCloser); ok {
		_ = h.CloseWrite()
		return
	}
	_ = c.Close()
}

// Pipe copies a to b and b to a, ending each side's writing once its
// source ends, and closes both once both directions are done.
func Pipe(a, b io.ReadWriteCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src io.ReadWriteCloser) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		closeWrite(dst)
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// Dial connects to addr and copies stdin to the connection and the
// connection to stdout: the tests' client inside a sandbox. It returns 0
// once both directions ended, 1 when it could not connect (the error on
// stderr).
func Dial(addr string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "outpost dial: %v\n", err)
		return 1
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, stdin)
		closeWrite(c)
		done <- err
	}()
	_, err = io.Copy(stdout, c)
	c.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintf(stderr, "outpost dial: %v\n", err)
		return 1
	}
	return 0
}
