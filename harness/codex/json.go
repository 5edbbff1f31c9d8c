package codex

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// obj is a JSON object decoded one level deep. Fields are read with
// tolerant getters, as kit.Obj's are: a field of an unexpected type reads
// as absent instead of failing the whole line. Codex keeps its own reader
// because its representation differs where it matters: a field stays the
// CLI's own bytes (raw, rawJSON), so tool inputs and MCP arguments pass
// through with their key order and number forms, which kit.Obj, decoding
// into Go values, would re-encode; and integers are read exactly, not
// through float64.
type obj map[string]json.RawMessage

// parseObj decodes b as a JSON object; anything else gives nil.
func parseObj(b []byte) obj {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '{' {
		return nil
	}
	var o obj
	if json.Unmarshal(b, &o) != nil {
		return nil
	}
	return o
}

// has reports whether k is present and not null.
func (o obj) has(k string) bool {
	v, ok := o[k]
	return ok && string(v) != "null"
}

// str reads a string field; anything else reads as "".
func (o obj) str(k string) string {
	v := o[k]
	if len(v) == 0 || v[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// boolean reads a boolean field; anything else reads as false.
func (o obj) boolean(k string) bool { return string(o[k]) == "true" }

// num reads an integral JSON number that fits an int64.
func (o obj) num(k string) (int64, bool) {
	v := o[k]
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f > math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// obj reads an object field; anything else reads as nil.
func (o obj) obj(k string) obj {
	v := o[k]
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	var m obj
	if json.Unmarshal(v, &m) != nil {
		return nil
	}
	return m
}

// list reads an array field; anything else reads as nil.
func (o obj) list(k string) []json.RawMessage {
	v := o[k]
	if len(v) == 0 || v[0] != '[' {
		return nil
	}
	var l []json.RawMessage
	if json.Unmarshal(v, &l) != nil {
		return nil
	}
	return l
}

// objs reads an array field's object elements.
func (o obj) objs(k string) []obj {
	var out []obj
	for _, raw := range o.list(k) {
		if m := parseObj(raw); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// raw returns a field as JSON, or nil when absent or null.
func (o obj) raw(k string) json.RawMessage {
	v, ok := o[k]
	if !ok || string(v) == "null" {
		return nil
	}
	return harness.SafeJSON(v) // valid JSON in valid UTF-8
}

// rawJSON returns a field that is JSON text: a string field's content
// when it parses as JSON (MCP arguments arrive both ways), else the field
// itself; nil when absent.
func (o obj) rawJSON(k string) json.RawMessage {
	v := o.raw(k)
	if len(v) > 0 && v[0] == '"' {
		if s := o.str(k); json.Valid([]byte(s)) {
			return harness.SafeJSON([]byte(s))
		}
	}
	return v
}

// marshal encodes v as JSON (kit.Marshal); it returns nil for values that
// cannot be encoded (never for the maps and strings the preset builds).
func marshal(v any) json.RawMessage { return kit.Marshal(v) }
