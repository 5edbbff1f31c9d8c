package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds of extraction. A final message longer than MaxText is searched in
// its last MaxText bytes; a JSON value longer than MaxValue is refused
// (with a problem naming its size) rather than decoded.
const (
	MaxText  = 16 << 20
	MaxValue = 4 << 20
)

// ErrNoJSON is returned by Extract when the text holds no JSON value.
var ErrNoJSON = errors.New("output: no JSON value in the answer")

// Source says where an extracted value came from.
type Source string

const (
	SourceFence    Source = "fence"    // the last ```json block
	SourceWhole    Source = "whole"    // the whole text is one JSON value
	SourceBalanced Source = "balanced" // the last balanced top-level object or array
)

// Extracted is the JSON value found in a final message.
type Extracted struct {
	// Raw is the value's text as the agent wrote it (not yet known to be
	// valid JSON when it came from a fence).
	Raw    []byte
	Source Source
}

// Extract finds the last JSON value of a final message: the content of the
// last top-level fenced code block whose info string is json (``` or ~~~,
// nested fences being content), else the whole text when it is one JSON
// value, else the last balanced top-level object or array that is valid
// JSON. It never panics, whatever the text holds (invalid UTF-8,
// megabytes). A fenced block is returned even when its content is not
// valid JSON: the caller reports that as the problem.
func Extract(text string) (Extracted, error) {
	if len(text) > MaxText {
		text = text[len(text)-MaxText:]
	}
	if blocks := fences(text, isJSONInfo); len(blocks) > 0 {
		return Extracted{Raw: []byte(blocks[len(blocks)-1].content), Source: SourceFence}, nil
	}
	if t := strings.TrimSpace(text); t != "" && json.Valid([]byte(t)) {
		return Extracted{Raw: []byte(t), Source: SourceWhole}, nil
	}
	if raw, ok := lastBalanced(text); ok {
		return Extracted{Raw: raw, Source: SourceBalanced}, nil
	}
	return Extracted{}, ErrNoJSON
}

func isJSONInfo(info string) bool {
	w, _, _ := strings.Cut(info, " ")
	w = strings.ToLower(strings.Trim(w, "{}."))
	return w == "json" || w == "jsonc" || w == "json5"
}

// block is one fenced code block.
type block struct {
	info    string
	content string
}

// fences returns the top-level fenced code blocks of text whose info string
// keep accepts, in order (CommonMark: a fence is three or more backticks
// or tildes indented at most three spaces; it closes on a line of the same
// character at least as long, with nothing else; an unclosed fence runs to
// the end). Fences inside a block are its content.
func fences(text string, keep func(info string) bool) []block {
	var out []block
	var (
		open    bool
		char    byte
		n       int
		info    string
		content strings.Builder
	)
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		l := strings.TrimSuffix(line, "\r")
		trimmed := strings.TrimLeft(l, " ")
		indent := len(l) - len(trimmed)
		if !open {
			if indent > 3 || len(trimmed) < 3 || (trimmed[0] != '`' && trimmed[0] != '~') {
				continue
			}
			c := trimmed[0]
			k := 0
			for k < len(trimmed) && trimmed[k] == c {
				k++
			}
			if k < 3 {
				continue
			}
			rest := strings.TrimSpace(trimmed[k:])
			if c == '`' && strings.ContainsRune(rest, '`') {
				continue // inline code, not a fence
			}
			open, char, n, info = true, c, k, rest
			content.Reset()
			continue
		}
		if indent <= 3 && len(trimmed) >= n && trimmed[0] == char {
			k := 0
			for k < len(trimmed) && trimmed[k] == char {
				k++
			}
			if k >= n && strings.TrimSpace(trimmed[k:]) == "" {
				if keep(info) {
					out = append(out, block{info: info, content: content.String()})
				}
				open = false
				continue
			}
		}
		if content.Len() > 0 {
			content.WriteByte('\n')
		}
		content.WriteString(line)
	}
	if open && keep(info) {
		out = append(out, block{info: info, content: content.String()})
	}
	return out
}

// lastBalanced returns the balanced object or array of text that ends
// last and is valid JSON (an enclosing value ends after what it encloses,
// so a value wins over its parts; a bracket of prose that never closes
// does not hide a value after it). When none is valid it returns the last
// balanced candidate starting with '{', so the caller can say why it is
// not JSON. One pass finds the candidates; checking them is bounded by a
// byte budget, so hostile text stays linear.
func lastBalanced(text string) ([]byte, bool) {
	type span struct{ start, end int }
	var (
		stack    []int
		spans    []span
		inStr    bool
		esc      bool
		maxSpans = 1 << 20 // the earliest are dropped past it
	)
	for j := 0; j < len(text); j++ {
		c := text[j]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			case c == '\n':
				// JSON strings hold no raw newline: this was prose.
				inStr, stack = false, stack[:0]
			}
			continue
		}
		switch c {
		case '"':
			inStr = len(stack) > 0
		case '{', '[':
			stack = append(stack, j)
		case '}', ']':
			if len(stack) == 0 {
				continue
			}
			o := stack[len(stack)-1]
			if (text[o] == '{') != (c == '}') {
				stack = stack[:0] // mismatched: prose
				continue
			}
			stack = stack[:len(stack)-1]
			if len(spans) >= maxSpans {
				spans = append(spans[:0], spans[len(spans)/2:]...)
			}
			spans = append(spans, span{o, j})
		}
	}
	budget := 4*len(text) + MaxValue
	b := []byte(text)
	var invalid []byte
	for i := len(spans) - 1; i >= 0; i-- {
		cand := b[spans[i].start : spans[i].end+1]
		if budget -= len(cand); budget < 0 {
			break
		}
		if json.Valid(cand) {
			return cand, true
		}
		if invalid == nil && cand[0] == '{' {
			invalid = cand
		}
	}
	return invalid, invalid != nil
}

// Answer is a checked answer: the value when it matched, else the
// problems.
type Answer struct {
	// Value is the validated value, compacted, valid UTF-8; nil when the
	// answer was refused.
	Value json.RawMessage
	// Problems say why the answer was refused; nil when it matched.
	Problems []Problem
	Source   Source
}

// OK reports whether the answer matched.
func (a Answer) OK() bool { return a.Value != nil && len(a.Problems) == 0 }

// Check extracts the last JSON value of text and validates it against s.
// A missing value, one that is not JSON or too large, and one that does
// not match are all problems, never errors.
func (s *Schema) Check(text string) Answer {
	x, err := Extract(text)
	if err != nil {
		return Answer{Problems: []Problem{{Message: "the answer holds no JSON value"}}}
	}
	return s.checkRaw(x)
}

func (s *Schema) checkRaw(x Extracted) Answer {
	v, compact, p := Decode(x.Raw)
	if p != nil {
		return Answer{Problems: []Problem{*p}, Source: x.Source}
	}
	if ps := s.Validate(v); len(ps) > 0 {
		return Answer{Problems: ps, Source: x.Source}
	}
	return Answer{Value: compact, Source: x.Source}
}

// Decode decodes one JSON value (numbers as json.Number, as Validate
// expects) and returns it with its compact, valid-UTF-8 text; a value
// that is not JSON or larger than MaxValue gives a problem instead.
func Decode(raw []byte) (any, json.RawMessage, *Problem) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > MaxValue {
		return nil, nil, &Problem{Message: fmt.Sprintf("the JSON value is %d bytes, over the %d byte limit", len(raw), MaxValue)}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, &Problem{Message: "the answer is not valid JSON: " + oneLine(err.Error(), 300)}
	}
	var out []byte
	if utf8.Valid(raw) {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			out = buf.Bytes()
		}
	}
	if out == nil {
		// Invalid UTF-8 inside strings: re-encoding replaces it.
		if out, err = json.Marshal(v); err != nil {
			return nil, nil, &Problem{Message: "the answer cannot be re-encoded: " + oneLine(err.Error(), 300)}
		}
	}
	return v, out, nil
}
