package claude

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
)

// obj is a decoded JSON object. Lines are decoded once (numbers as
// json.Number) and fields are read with tolerant getters: a field of an
// unexpected type reads as absent instead of failing the whole line, so a
// CLI update that changes one field's type costs that field only. Strings
// decoded by encoding/json are valid UTF-8 (invalid bytes become U+FFFD).
type obj map[string]any

// parseObj decodes b as a JSON object; anything else gives nil.
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

func (o obj) has(k string) bool { return o[k] != nil }

func (o obj) str(k string) string {
	s, _ := o[k].(string)
	return s
}

func (o obj) boolean(k string) bool {
	b, _ := o[k].(bool)
	return b
}

// num reads a JSON number as an int64 (truncated toward zero), refusing
// values out of range.
func (o obj) num(k string) (int64, bool) {
	f, ok := o.float(k)
	if !ok || f > math.MaxInt64/2 || f < -math.MaxInt64/2 {
		return 0, false
	}
	return int64(f), true
}

func (o obj) float(k string) (float64, bool) {
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

func (o obj) obj(k string) obj {
	m, _ := o[k].(map[string]any)
	return obj(m)
}

func (o obj) arr(k string) []any {
	a, _ := o[k].([]any)
	return a
}

// objs returns the elements of array k that are objects.
func (o obj) objs(k string) []obj {
	var out []obj
	for _, e := range o.arr(k) {
		if m, ok := e.(map[string]any); ok {
			out = append(out, obj(m))
		}
	}
	return out
}

// raw returns field k encoded as JSON (valid, valid UTF-8), or nil when
// absent.
func (o obj) raw(k string) json.RawMessage {
	v, ok := o[k]
	if !ok {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return nil
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// contentText flattens a message or tool_result content: a string as is;
// an array of blocks as their texts joined by newlines, with images and
// other non-text blocks named in brackets.
func contentText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, b := range x {
			m, ok := b.(map[string]any)
			if !ok {
				continue
			}
			switch t := obj(m).str("type"); t {
			case "text":
				parts = append(parts, obj(m).str("text"))
			case "":
			default:
				parts = append(parts, "["+t+"]")
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}
