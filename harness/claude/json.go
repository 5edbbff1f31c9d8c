package claude

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/outposthq/outpost/internal/jsonobj"
)

// obj is a decoded JSON object read with the tolerant getters of
// internal/jsonobj, shared with the other presets.
type obj = jsonobj.Obj

func parseObj(b []byte) obj { return jsonobj.Parse(b) }

// raw returns field k of o encoded as JSON (valid, valid UTF-8, HTML
// characters as they are, an explicit null kept), or nil when absent.
func raw(o obj, k string) json.RawMessage {
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
			switch t := obj(m).Str("type"); t {
			case "text":
				parts = append(parts, obj(m).Str("text"))
			case "":
			default:
				parts = append(parts, "["+t+"]")
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}
