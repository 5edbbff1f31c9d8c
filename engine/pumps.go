package engine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/bufpool"
)

// Bounds of the agent's output.
const (
	// defaultMaxLine bounds one native output line (RunOptions.MaxLine).
	defaultMaxLine = 64 << 20
	// maxStderrLine bounds one line of the agent's standard error; longer
	// ones are dropped.
	maxStderrLine = 1 << 20
	// stderrTailLines is how many last lines of standard error a failure
	// reports (details.stderr).
	stderrTailLines = 20
)

// pumpStdout turns the agent's output lines into events.
func (s *stream) pumpStdout(r io.Reader) {
	e := s.e
	readLines(r, e.o.MaxLine, func(line []byte, dropped int) {
		if dropped > 0 {
			s.touch()
			s.emit(harness.Event{Type: harness.EventNotice, Kind: "line_too_long", Text: fmt.Sprintf("dropped a native output line of %d bytes (limit %d)", dropped, maxLine(e.o.MaxLine)), Details: map[string]any{"bytes": dropped}})
			return
		}
		evs := s.decodeLine(line)
		// A line that only says the agent retries is no progress: it does
		// not feed the inactivity watchdog, and starts the retry bound. A
		// line that gives no events (noise, or text a decoder holds) feeds
		// the watchdog but is no progress either.
		switch {
		case len(evs) == 0:
			s.alive()
		case onlyRetries(evs):
			s.retried()
		default:
			s.touch()
		}
		for _, ev := range evs {
			if e.o.Raw {
				ev.Raw = rawJSON(line)
			}
			s.emit(ev)
		}
		if s.live != nil && s.live.Done() {
			s.over()
		}
	})
	if s.e.h.DecodeEnd && s.live == nil {
		// The end of the output: a decoder that accumulates emits its last
		// events.
		for _, ev := range s.decodeLine(nil) {
			s.emit(ev)
		}
	}
}

// onlyRetries reports whether a line's events are all retry notices.
func onlyRetries(evs []harness.Event) bool {
	for _, ev := range evs {
		if ev.Type != harness.EventNotice || ev.Kind != "retry" {
			return false
		}
	}
	return len(evs) > 0
}

// pumpStderr reads the agent's standard error: each line is matched
// against the preset's failure patterns, kept in the tail a failure
// reports, and copied, redacted, to RunOptions.Stderr.
func (s *stream) pumpStderr(r io.Reader) {
	e := s.e
	readLines(r, maxStderrLine, func(line []byte, dropped int) {
		s.alive() // diagnostics: the agent lives, which is no progress
		if dropped > 0 {
			return
		}
		text := string(line)
		s.mu.Lock()
		if c := s.note(text); strings.TrimSpace(text) != "" {
			s.seen.lastStderr = c
		}
		s.mu.Unlock()
		s.stderrMu.Lock()
		s.stderrTail = append(s.stderrTail, text)
		if len(s.stderrTail) > stderrTailLines {
			s.stderrTail = s.stderrTail[1:]
		}
		s.stderrMu.Unlock()
		if e.o.Stderr != nil {
			fmt.Fprintln(e.o.Stderr, e.red.String(text))
		}
	})
}

// decodeLine decodes one output line with the preset's decoder (or its
// live protocol, whose replies go to the agent's input). A decoder that
// panics gives a notice instead.
func (s *stream) decodeLine(line []byte) (evs []harness.Event) {
	defer func() {
		if r := recover(); r != nil {
			evs = []harness.Event{{Type: harness.EventNotice, Kind: "decode_error", Text: fmt.Sprintf("the %s preset failed to decode a line of %d bytes: %v", s.e.h.Name, len(line), r)}}
		}
	}()
	if s.live != nil {
		var out bytes.Buffer
		evs = s.live.Decode(line, &out)
		if out.Len() > 0 {
			s.stdin.writeBytes(out.Bytes())
		}
		return evs
	}
	return s.decode(line)
}

func maxLine(n int) int {
	if n <= 0 {
		return defaultMaxLine
	}
	return n
}

// readLines calls f for every line of r (without its newline). A line
// longer than max is dropped: f gets it as (nil, its length). It returns at
// EOF or on a read error.
func readLines(r io.Reader, max int, f func(line []byte, dropped int)) {
	max = maxLine(max)
	br := bufpool.LineReader(r)
	defer bufpool.PutLineReader(br)
	var buf []byte
	dropping := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if complete {
				chunk = chunk[:len(chunk)-1]
			}
			switch {
			case dropping > 0:
				dropping += len(chunk)
			case len(buf)+len(chunk) > max:
				dropping = len(buf) + len(chunk)
				buf = buf[:0]
			case !complete || len(buf) > 0:
				buf = append(buf, chunk...)
			}
			if complete {
				switch {
				case dropping > 0:
					f(nil, dropping)
					dropping = 0
				case len(buf) > 0:
					f(bytes.TrimSuffix(buf, []byte{'\r'}), 0)
					buf = buf[:0]
				default:
					if l := bytes.TrimSuffix(chunk, []byte{'\r'}); len(bytes.TrimSpace(l)) > 0 {
						f(l, 0)
					}
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if dropping > 0 {
				f(nil, dropping)
			} else if len(bytes.TrimSpace(buf)) > 0 {
				f(buf, 0)
			}
			return
		}
	}
}

// rawJSON returns line as raw JSON when it is valid JSON, else as a JSON
// string, so an event's Raw field is always valid JSON.
func rawJSON(line []byte) []byte {
	if jsonValid(line) {
		return append([]byte(nil), line...)
	}
	return jsonString(line)
}

// jsonValid reports whether a native line can be attached to its event
// as it is (valid UTF-8 and JSON).
func jsonValid(b []byte) bool { return utf8.Valid(b) && json.Valid(b) }

// jsonString is a native line that is not JSON, as a JSON string.
func jsonString(b []byte) []byte {
	out, _ := json.Marshal(string(b))
	return out
}
