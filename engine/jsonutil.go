package engine

import (
	"encoding/json"
	"unicode/utf8"
)

func jsonValid(b []byte) bool { return utf8.Valid(b) && json.Valid(b) }

func jsonString(b []byte) []byte {
	out, _ := json.Marshal(string(b))
	return out
}
