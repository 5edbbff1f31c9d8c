package kit

import (
	"bytes"
	"encoding/json"
	"math"
)

// Obj is a decoded JSON object read with tolerant getters: a field of an
// unexpected type reads as absent instead of failing the whole line, so a
// CLI update that changes one field's type costs that field only. Numbers
// are kept as json.Number; strings decoded by encoding/json are valid
// UTF-8 (invalid bytes become U+FFFD).
type Obj map[string]any

// Parse decodes b as one JSON object; anything else gives nil.
// encoding/json bounds nesting depth, so no input can exhaust the stack.
func Parse(b []byte) Obj {
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
	return Obj(m)
}

// Str reads a JSON string; "" when k is absent or not a string.
func (o Obj) Str(k string) string {
	s, _ := o[k].(string)
	return s
}

// Bool reads a JSON boolean; ok is false when k is absent or not one.
func (o Obj) Bool(k string) (v, ok bool) {
	v, ok = o[k].(bool)
	return v, ok
}

// Num reads a JSON number as an int64 (truncated toward zero), refusing
// values out of range.
func (o Obj) Num(k string) (int64, bool) {
	f, ok := o.Float(k)
	if !ok || f > math.MaxInt64/2 || f < -math.MaxInt64/2 {
		return 0, false
	}
	return int64(f), true
}

// Obj reads a nested object; nil when k is absent or not an object.
func (o Obj) Obj(k string) Obj {
	m, _ := o[k].(map[string]any)
	return Obj(m)
}

// Objs returns the elements of array k that are objects.
func (o Obj) Objs(k string) []Obj {
	var out []Obj
	for _, e := range o.Arr(k) {
		if m, ok := e.(map[string]any); ok {
			out = append(out, Obj(m))
		}
	}
	return out
}

// Raw re-encodes field k as JSON (nil when absent or null).
func (o Obj) Raw(k string) json.RawMessage {
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

// Has reports whether k is present and not null.
func (o Obj) Has(k string) bool { return o[k] != nil }

// Flag reads a JSON boolean; false when k is absent or not a boolean.
func (o Obj) Flag(k string) bool {
	v, _ := o[k].(bool)
	return v
}

// Float reads a finite JSON number.
func (o Obj) Float(k string) (float64, bool) {
	n, ok := o[k].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// Arr reads a JSON array; nil when k is absent or not an array.
func (o Obj) Arr(k string) []any {
	a, _ := o[k].([]any)
	return a
}
