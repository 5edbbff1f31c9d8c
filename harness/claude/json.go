package claude

import (
	"encoding/json"
	"strings"

	"github.com/outposthq/outpost/harness/kit"
)

// obj is a decoded JSON object read with the kit's tolerant getters.
type obj = kit.Obj

func parseObj(b []byte) obj { return kit.Parse(b) }

// raw returns field k of o encoded as JSON (valid, valid UTF-8, HTML
// characters as they are, an explicit null kept), or nil when absent.
func raw(o obj, k string) json.RawMessage {
	v, ok := o[k]
	if !ok {
		return nil
	}
	return kit.Marshal(v)
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
