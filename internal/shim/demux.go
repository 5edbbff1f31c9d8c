package shim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
)

// StartErr is how a provider's Start reports a handshake that says the
// program did not start: a program not found as an *exec.Error wrapping
// exec.ErrNotFound, a missing working directory as an error wrapping both
// ErrNoDir and fs.ErrNotExist, anything else as h.Err. It is nil when the
// program runs.
func (h Handshake) StartErr(path string) error {
	switch {
	case h.Err == nil:
		return nil
	case errors.Is(h.Err, ErrNotFound):
		return &exec.Error{Name: path, Err: exec.ErrNotFound}
	case errors.Is(h.Err, ErrNoDir):
		return fmt.Errorf("%w (%w)", h.Err, fs.ErrNotExist)
	}
	return h.Err
}

// maxHeld bounds what a Demux holds: the handshake line, and stderr
// before the handshake.
const maxHeld = 64 << 10

// Demux splits an exec shim's output for a provider whose transport
// writes the shim's stdout and stderr to writers (the Engine's attach
// stream, a Kubernetes exec), possibly from two goroutines. It takes the
// handshake line off the head of stdout, and holds stderr back until the
// handshake is known, so that the transport never blocks on a reader that
// Start has not handed out yet.
type Demux struct {
	stdout, stderr io.Writer
	onHandshake    func(Handshake, error)
	up             func()
	known          chan struct{} // closed once the handshake is read

	line bytes.Buffer // stdout until the handshake line (stdout's side)
	seen bool

	held    bytes.Buffer // stderr until the handshake (stderr's side)
	flushed bool
}

// NewDemux returns a Demux writing the program's output to stdout and
// stderr. onHandshake is called once, with the handshake or why it could
// not be read, before any of the program's output is written. up, when
// not nil, is called before each write of the program's output.
func NewDemux(stdout, stderr io.Writer, onHandshake func(Handshake, error), up func()) *Demux {
	if up == nil {
		up = func() {}
	}
	return &Demux{stdout: stdout, stderr: stderr, onHandshake: onHandshake, up: up, known: make(chan struct{})}
}

// Stdout is the writer for the shim's stdout.
func (d *Demux) Stdout() io.Writer { return demuxOut{d} }

// Stderr is the writer for the shim's stderr.
func (d *Demux) Stderr() io.Writer { return demuxErr{d} }

// End is called once the transport has stopped writing. When the
// handshake never came, it returns false and what the shim wrote on both
// streams, for the error; otherwise it writes out stderr still held.
func (d *Demux) End() (written string, handshook bool) {
	if !d.seen {
		return d.line.String() + " " + d.held.String(), false
	}
	if !d.flushed && d.held.Len() > 0 {
		_, _ = d.stderr.Write(d.held.Bytes())
	}
	return "", true
}

type demuxOut struct{ d *Demux }

func (w demuxOut) Write(b []byte) (int, error) {
	d := w.d
	if d.seen {
		d.up()
		return d.stdout.Write(b)
	}
	d.line.Write(b)
	i := bytes.IndexByte(d.line.Bytes(), '\n')
	if i < 0 {
		if d.line.Len() > maxHeld {
			return 0, errors.New("no exec shim handshake in the first 64 KiB of output")
		}
		return len(b), nil
	}
	d.seen = true
	rest := append([]byte(nil), d.line.Bytes()[i+1:]...)
	d.onHandshake(ReadHandshake(bufio.NewReader(bytes.NewReader(d.line.Bytes()[:i+1]))))
	close(d.known)
	if len(rest) > 0 {
		d.up()
		if _, err := d.stdout.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

type demuxErr struct{ d *Demux }

func (w demuxErr) Write(b []byte) (int, error) {
	d := w.d
	select {
	case <-d.known:
	default:
		if d.held.Len() < maxHeld {
			d.held.Write(b)
		}
		return len(b), nil
	}
	d.up()
	if !d.flushed {
		d.flushed = true
		if d.held.Len() > 0 {
			if _, err := d.stderr.Write(d.held.Bytes()); err != nil {
				return 0, err
			}
		}
	}
	return d.stderr.Write(b)
}
