package declarative

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// fieldPath is a parsed field path: names, array indexes, and "*" (every
// element of an array, or every value of an object).
type fieldPath []string

func parsePath(s string) (fieldPath, error) {
	if s == "" {
		return nil, fmt.Errorf("empty field path")
	}
	if len(s) > 512 {
		return nil, fmt.Errorf("field path longer than 512 bytes")
	}
	p := strings.Split(s, ".")
	for _, seg := range p {
		if seg == "" {
			return nil, fmt.Errorf("field path %q has an empty segment", s)
		}
	}
	if len(p) > 32 {
		return nil, fmt.Errorf("field path %q is deeper than 32", s)
	}
	return p, nil
}

// maxValues bounds what one path can fan out to on a hostile line.
const maxValues = 4096

// values returns what the path reaches in v.
func (p fieldPath) values(v any) []any {
	cur := []any{v}
	for _, seg := range p {
		var next []any
		for _, c := range cur {
			switch c := c.(type) {
			case map[string]any:
				if seg == "*" {
					for _, x := range c {
						next = append(next, x)
					}
				} else if x, ok := c[seg]; ok {
					next = append(next, x)
				}
			case []any:
				if seg == "*" {
					next = append(next, c...)
				} else if i, err := strconv.Atoi(seg); err == nil {
					if i < 0 {
						i += len(c)
					}
					if i >= 0 && i < len(c) {
						next = append(next, c[i])
					}
				}
			}
			if len(next) > maxValues {
				next = next[:maxValues]
				break
			}
		}
		cur = next
		if len(cur) == 0 {
			return nil
		}
	}
	return cur
}

// text joins the strings the path reaches ("" and false when none).
func (p fieldPath) text(v any) (string, bool) {
	if p == nil {
		return "", false
	}
	var b strings.Builder
	found := false
	for _, x := range p.values(v) {
		if s, ok := x.(string); ok {
			b.WriteString(s)
			found = true
		}
	}
	return b.String(), found
}

// number reads the first number the path reaches; a numeric string counts.
func (p fieldPath) number(v any) (int64, bool) {
	if p == nil {
		return 0, false
	}
	for _, x := range p.values(v) {
		switch x := x.(type) {
		case json.Number:
			if n, err := x.Int64(); err == nil && n >= 0 {
				return n, true
			}
			if f, err := x.Float64(); err == nil && f >= 0 && f < math.MaxInt64 {
				return int64(f), true
			}
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil && n >= 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// decodeLine parses one JSON line into a generic value, numbers kept
// exact. A line that is not one JSON object gives nil.
func decodeLine(line []byte) map[string]any {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || dec.More() {
		return nil
	}
	if _, err := dec.Token(); err == nil {
		return nil // trailing data
	}
	return m
}

// condition is one When entry: a path and the value it must hold.
type condition struct {
	path fieldPath
	want any
}

func (c condition) holds(v any) bool {
	for _, x := range c.path.values(v) {
		if equalJSON(x, c.want) {
			return true
		}
	}
	return false
}

// equalJSON compares a decoded line value (numbers as json.Number) with a
// When value (numbers as float64).
func equalJSON(got, want any) bool {
	if n, ok := got.(json.Number); ok {
		w, ok := want.(float64)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f == w
	}
	switch want.(type) {
	case map[string]any, []any:
		return reflect.DeepEqual(normalize(got), want)
	}
	return got == want
}

func normalize(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _ := v.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalize(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x)
		}
		return out
	}
	return v
}
