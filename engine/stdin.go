package engine

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/outposthq/outpost/harness"
)

// stdin is the agent's standard input, shared by the feeder, the live
// protocol's replies, the steerer and the watchdog: one write at a time,
// each whole, and none after close.
type stdin struct {
	mu sync.Mutex
	w  io.WriteCloser // nil once closed, or when the process has none
}

// close closes the input; calling it again does nothing.
func (in *stdin) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.w != nil {
		in.w.Close()
		in.w = nil
	}
}

// write writes what f produces, in one piece.
func (in *stdin) write(f func(w io.Writer) error) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.w == nil {
		return errors.New("standard input closed")
	}
	var buf bytes.Buffer
	if err := f(&buf); err != nil {
		return err
	}
	_, err := in.w.Write(buf.Bytes())
	return err
}

// writeBytes writes b.
func (in *stdin) writeBytes(b []byte) error {
	return in.write(func(w io.Writer) error { _, err := w.Write(b); return err })
}

// feed gives the agent its input: the live protocol's opening, or the
// command's fixed content (then closed unless the command keeps it open).
func (s *stream) feed(cmd harness.Command) error {
	if s.live != nil {
		return s.stdin.write(s.live.Begin)
	}
	if s.stdin.w == nil {
		return nil
	}
	go func() {
		if len(cmd.Stdin) > 0 {
			s.stdin.writeBytes(cmd.Stdin)
		}
		if !cmd.KeepStdin {
			s.stdin.close()
		}
	}()
	return nil
}

// interrupt asks a live session to interrupt its turn and reports whether
// the preset wrote anything for it.
func (s *stream) interrupt() bool {
	wrote := false
	err := s.stdin.write(func(w io.Writer) error {
		var buf bytes.Buffer
		if err := s.live.Interrupt(&buf); err != nil {
			return err
		}
		wrote = buf.Len() > 0
		_, err := w.Write(buf.Bytes())
		return err
	})
	return err == nil && wrote
}
