package antigravity

import (
	"bytes"
	"encoding/json"
	"math"
)

// obj is a decoded JSON object read with tolerant getters: a field of an
// unexpected type reads as absent instead of failing the whole line, so a
// CLI update that changes one field's type costs that field only. Numbers
// are kept as json.Number; strings decoded by encoding/json are valid
// UTF-8 (invalid bytes become U+FFFD).
type obj map[string]any

// parseObj decodes b as one JSON object; anything else gives nil.
// encoding/json bounds nesting depth, so no input can exhaust the stack.
func parseObj(b []byte) obj {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '{' {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil
	}
	return obj(m)
}

func (o obj) str(k string) string {
	s, _ := o[k].(string)
	return s
}

// boolean reads a JSON boolean; ok is false when k is absent or not one.
func (o obj) boolean(k string) (v, ok bool) {
	v, ok = o[k].(bool)
	return v, ok
}

// num reads a JSON number as an int64 (truncated toward zero), refusing
// values out of range.
func (o obj) num(k string) (int64, bool) {
	n, ok := o[k].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64/2 || f < -math.MaxInt64/2 {
		return 0, false
	}
	return int64(f), true
}

func (o obj) obj(k string) obj {
	m, _ := o[k].(map[string]any)
	return obj(m)
}

// objs returns the elements of array k that are objects.
func (o obj) objs(k string) []obj {
	a, _ := o[k].([]any)
	var out []obj
	for _, e := range a {
		if m, ok := e.(map[string]any); ok {
			out = append(out, obj(m))
		}
	}
	return out
}

// raw re-encodes field k as JSON (nil when absent or null).
func (o obj) raw(k string) json.RawMessage {
	v, ok := o[k]
	if !ok || v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
