package inside

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// ForwardMode is the exec shim's mode that runs Forward.
const ForwardMode = "forward"

// ForwardArgs are the in-sandbox binary's arguments before Forward's own.
func ForwardArgs() []string { return []string{"sandbox-shim", ForwardMode} }

// Forward is the sandbox's side of a tunnel carried over a Unix socket
// (the local provider's isolated leases, whose network namespace has
// loopback only): args are an optional --status-fd=N, then ADDR=SOCKET
// pairs, then "--" and a program with its arguments. With --status-fd, a
// death of the program by signal n is written to descriptor N as
// "signal n" (isolate.Reporter reads it: bwrap itself can only say
// 128+n). It listens on each ADDR (on the namespace's loopback),
// carries every connection it accepts to its SOCKET (bound in from the
// host, where the gateway serves it), and runs the program with the
// standard streams and environment it was given. SIGTERM and SIGINT do
// not end it: they are sent to its process group, which the program is
// in (passing them on would deliver them twice), and it ends when the
// program does. It returns the program's exit status (128+n for a death by
// signal n), 127 when the program cannot start, 2 on bad arguments.
func Forward(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var report *os.File
	if len(args) > 0 {
		if v, ok := strings.CutPrefix(args[0], "--status-fd="); ok {
			fd, err := strconv.Atoi(v)
			if err != nil || fd < 3 {
				fmt.Fprintf(stderr, "outpost forward: want --status-fd=N (N >= 3), got %q\n", args[0])
				return 2
			}
			// The program must not inherit the report's descriptor.
			syscall.CloseOnExec(fd)
			report = os.NewFile(uintptr(fd), "status")
			args = args[1:]
		}
	}
	var pairs [][2]string
	i := 0
	for ; i < len(args) && args[i] != "--"; i++ {
		addr, sock, ok := strings.Cut(args[i], "=")
		if !ok {
			fmt.Fprintf(stderr, "outpost forward: want ADDR=SOCKET, got %q\n", args[i])
			return 2
		}
		pairs = append(pairs, [2]string{addr, sock})
	}
	if i+1 >= len(args) {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim forward [--status-fd=N] ADDR=SOCKET... -- PROGRAM [ARG...]")
		return 2
	}
	for _, p := range pairs {
		ln, err := net.Listen("tcp", p[0])
		if err != nil {
			fmt.Fprintf(stderr, "outpost forward: listening on %s: %v\n", p[0], err)
			return 1
		}
		go forwardTo(ln, p[1])
	}
	cmd := exec.Command(args[i+1], args[i+2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "outpost forward: %v\n", err)
		return 127
	}
	go func() {
		for range sigs {
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if report != nil {
				// bwrap will say 128+n; the report says it was a signal.
				fmt.Fprintf(report, "signal %d\n", int(ws.Signal()))
			}
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

// forwardTo carries every connection ln accepts to the Unix socket sock.
func forwardTo(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			u, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				return
			}
			Pipe(c, u)
		}()
	}
}
