package kit

import (
	"fmt"

	"github.com/outposthq/outpost/harness"
)

// Guard runs decode, a decoder's work on one output line, and turns a
// panic in it into a notice of kind "decode_error": a line that trips the
// decoder is reported and skipped, it never takes the turn down. preset
// and what name the line in the notice's text, as in "codex: a 120-byte
// app-server message could not be decoded".
func Guard(line []byte, preset, what string, decode func() []harness.Event) (evs []harness.Event) {
	defer func() {
		if r := recover(); r != nil {
			evs = []harness.Event{{Type: harness.EventNotice, Kind: "decode_error", Text: fmt.Sprintf("%s: a %d-byte %s could not be decoded", preset, len(line), what)}}
		}
	}()
	return decode()
}
