package credentials

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// Event redacts every string field of e in place: Agent, Conversation,
// Session, Text, ID, Stop, Kind, the Tool's ID, Name, Output and Input, the
// Details (keys and values, recursively through maps, slices, strings,
// []byte, json.RawMessage and errors; a value of another type is replaced
// by its redacted %v text when that text contains a secret), and Raw.
//
// Raw and Tool.Input are JSON: secrets are redacted inside its string
// values whatever their escaping (plain, \" \\ \u003c as json.Marshal
// writes them, or \u escapes), a number or literal containing a secret
// becomes the string "[REDACTED]", and the result stays valid JSON with
// its original formatting elsewhere. If a secret still shows in the text
// afterwards (one spanning several tokens), the whole value becomes
// "[REDACTED]". A Raw that was not valid JSON and contains a secret becomes
// a JSON string of its redacted text.
//
// Fields are only replaced, never written through: a Tool, Details map or
// Raw slice shared with someone else is copied when it changes.
func (r *Redactor) Event(e *harness.Event) {
	s := r.load()
	if e == nil || s.empty() {
		return
	}
	for _, f := range []*string{&e.Agent, &e.Conversation, &e.Session, &e.Text, &e.ID, &e.Stop, &e.Kind} {
		*f = s.str(*f)
	}
	if e.Tool != nil {
		t := *e.Tool
		t.ID = s.str(t.ID)
		t.Name = s.str(t.Name)
		t.Output = s.str(t.Output)
		t.Input = s.rawJSON(t.Input)
		e.Tool = &t
	}
	if e.Details != nil {
		if v, changed := s.value(e.Details, 0); changed {
			e.Details, _ = v.(map[string]any)
		}
	}
	e.Raw = s.rawJSON(e.Raw)
}

// maxValueDepth bounds the recursion into Details; deeper values are
// replaced by their redacted %v text.
const maxValueDepth = 32

// value redacts a Details value and reports whether it changed. Maps and
// slices are copied when anything in them changes.
func (s *secretSet) value(v any, depth int) (any, bool) {
	if r, changed, ok := s.leaf(v); ok {
		return r, changed
	}
	if depth >= maxValueDepth {
		return s.formatted(v)
	}
	inner := func(x any) (any, bool) { return s.value(x, depth+1) }
	switch x := v.(type) {
	case map[string]any:
		return redactMap(s, x, inner)
	case map[string]string:
		return redactMap(s, x, s.strChanged)
	case []any:
		return redactSlice(x, inner)
	case []string:
		return redactSlice(x, s.strChanged)
	}
	return s.formatted(v)
}

// leaf redacts a value that holds no other Details value (numbers,
// strings, bytes, JSON, errors); ok is false for any other type.
func (s *secretSet) leaf(v any) (r any, changed, ok bool) {
	switch x := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		r, changed = s.formatted(v)
	case string:
		r, changed = s.strChanged(x)
	case json.RawMessage:
		b := s.rawJSON(x)
		r, changed = json.RawMessage(b), !bytes.Equal(b, x)
	case []byte:
		b := s.bytes(x)
		r, changed = b, !bytes.Equal(b, x)
	case error:
		r, changed = s.redactErr(x)
	default:
		return nil, false, false
	}
	return r, changed, true
}

// strChanged is str and whether it changed anything.
func (s *secretSet) strChanged(x string) (string, bool) {
	r := s.str(x)
	return r, r != x
}

// redactMap redacts m's keys and, with redact, its values; m is copied
// when anything changes, never written.
func redactMap[V any](s *secretSet, m map[string]V, redact func(V) (V, bool)) (map[string]V, bool) {
	var out map[string]V
	for k, val := range m {
		nk := s.str(k)
		nv, changed := redact(val)
		if (changed || nk != k) && out == nil {
			out = maps.Clone(m)
		}
		if out != nil {
			if nk != k {
				delete(out, k)
			}
			out[nk] = nv
		}
	}
	if out == nil {
		return m, false
	}
	return out, true
}

// redactSlice redacts x's elements with redact; x is copied when anything
// changes, never written.
func redactSlice[V any](x []V, redact func(V) (V, bool)) ([]V, bool) {
	var out []V
	for i, val := range x {
		nv, changed := redact(val)
		if changed && out == nil {
			out = slices.Clone(x)
		}
		if out != nil {
			out[i] = nv
		}
	}
	if out == nil {
		return x, false
	}
	return out, true
}

// formatted returns v unchanged unless its %v text contains a secret, in
// which case it returns that text redacted.
func (s *secretSet) formatted(v any) (any, bool) {
	if v == nil {
		return nil, false
	}
	text := fmt.Sprint(v)
	if r := s.str(text); r != text {
		return r, true
	}
	return v, false
}

// rawJSON redacts a JSON value (see Event).
func (s *secretSet) rawJSON(raw []byte) []byte {
	if s.empty() || len(raw) < MinSecretLen {
		return raw
	}
	if !json.Valid(raw) {
		r := s.bytes(raw)
		if bytes.Equal(r, raw) {
			return raw
		}
		return jsonString(string(r))
	}
	var out []byte // nil until something changes
	last := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '"':
			j, esc := i+1, false
			for j < len(raw) && raw[j] != '"' {
				if raw[j] == '\\' {
					esc = true
					j++
				}
				j++
			}
			if j >= len(raw) { // cannot happen in valid JSON
				return s.jsonFallback()
			}
			if repl, changed := s.jsonStringToken(raw[i:j+1], esc); changed {
				out = append(out, raw[last:i]...)
				out = append(out, repl...)
				last = j + 1
			}
			i = j + 1
		case c == '-' || c == '+' || c == '.' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
			j := i
			for j < len(raw) && (raw[j] == '-' || raw[j] == '+' || raw[j] == '.' || ('0' <= raw[j] && raw[j] <= '9') || ('a' <= raw[j] && raw[j] <= 'z') || ('A' <= raw[j] && raw[j] <= 'Z')) {
				j++
			}
			if contains(s.pm, raw[i:j]) {
				out = append(out, raw[last:i]...)
				out = append(out, `"`+Redacted+`"`...)
				last = j
			}
			i = j
		default:
			i++
		}
	}
	if out == nil {
		if contains(s.fm, raw) {
			return s.jsonFallback()
		}
		return raw
	}
	out = append(out, raw[last:]...)
	if contains(s.fm, out) || !json.Valid(out) {
		return s.jsonFallback()
	}
	return out
}

// jsonStringToken redacts one JSON string token (quotes included).
func (s *secretSet) jsonStringToken(tok []byte, escaped bool) ([]byte, bool) {
	if !escaped {
		content := tok[1 : len(tok)-1]
		sp := find(s.pm, content)
		if len(sp) == 0 {
			return tok, false
		}
		out := make([]byte, 0, len(tok)+len(sp)*len(Redacted))
		out = append(out, '"')
		if s.marker {
			out = append(out, s.str(string(content))...)
		} else {
			out = replaceBytes(out, content, sp)
		}
		return append(out, '"'), true
	}
	var v string
	if err := json.Unmarshal(tok, &v); err != nil {
		return []byte(`"` + Redacted + `"`), true
	}
	r := s.str(v)
	if r == v {
		return tok, false
	}
	return jsonString(r), true
}

// jsonFallback is the whole-value replacement when token-level redaction
// cannot guarantee a clean result.
func (s *secretSet) jsonFallback() []byte {
	fb := []byte(`"` + Redacted + `"`)
	if contains(s.fm, fb) {
		return []byte(`""`)
	}
	return fb
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return []byte(`"` + Redacted + `"`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Error returns err with every secret redacted from its text, keeping its
// chain for errors.Is and errors.As:
//
//   - nil gives nil; an error whose text and coded details hold no secret
//     is returned as is.
//   - An *outpost.Error gives a copy with Op, Agent, Msg and Details
//     redacted and Err replaced by its redacted form (which unwraps to the
//     original cause). Its Code is kept, so errors.Is(err,
//     outpost.ErrQuota) and CodeOf still work.
//   - Any other error gives a wrapper whose Error() is the redacted text and
//     whose Unwrap returns err. errors.As(…, **outpost.Error) on it yields a
//     redacted copy of the first *outpost.Error in the chain, never the
//     original.
//
// The causes the result unwraps to are the originals: print the returned
// error, not what you unwrap from it.
func (r *Redactor) Error(err error) error {
	s := r.load()
	if err == nil || s.empty() {
		return err
	}
	red, _ := s.redactErr(err)
	return red
}

// redactedError is an error whose text is redacted and whose chain is the
// original's.
type redactedError struct {
	msg   string
	err   error
	coded *outpost.Error // redacted copy of the first *outpost.Error in err's chain, if it differs
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// As hands out the redacted copy of a coded error in the chain, so a caller
// never extracts the original's unredacted message.
func (e *redactedError) As(target any) bool {
	p, ok := target.(**outpost.Error)
	if !ok || e.coded == nil {
		return false
	}
	*p = e.coded
	return true
}

// redactErr returns err redacted and whether anything changed.
func (s *secretSet) redactErr(err error) (error, bool) {
	if err == nil {
		return nil, false
	}
	if oe, ok := err.(*outpost.Error); ok {
		if c := s.codedCopy(oe); c != nil {
			return c, true
		}
		return err, false
	}
	text := err.Error()
	red := s.str(text)
	var coded *outpost.Error
	var oe *outpost.Error
	if errors.As(err, &oe) && oe != nil {
		coded = s.codedCopy(oe)
	}
	if red == text && coded == nil {
		return err, false
	}
	return &redactedError{msg: red, err: err, coded: coded}, true
}

// codedCopy returns a redacted copy of e, or nil when nothing in it holds a
// secret.
func (s *secretSet) codedCopy(e *outpost.Error) *outpost.Error {
	c := *e
	changed := false
	for _, f := range []*string{&c.Op, &c.Agent, &c.Msg} {
		if r := s.str(*f); r != *f {
			*f = r
			changed = true
		}
	}
	if c.Details != nil {
		if v, ok := s.value(c.Details, 0); ok {
			c.Details, _ = v.(map[string]any)
			changed = true
		}
	}
	if c.Err != nil {
		if r, ok := s.redactErr(c.Err); ok {
			c.Err = r
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return &c
}
