package gemini

import (
	"strconv"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// Decoder turns the CLI's --output-format stream-json lines (one JSON
// object per line, keyed by "type") into normalized events. It keeps what
// a line alone does not give: the answer since the last tool call (the
// finished event's text) and the id of the message being streamed. Use one
// Decoder per turn. It never panics, whatever the input.
//
// Mapping (measured with the pinned CLI, docs/presets/gemini.md):
//
//	init                     session (session_id)
//	message, role assistant  message, delta (id m<n>: a new id after each tool call)
//	message, role user       nothing (the prompt echoed)
//	tool_use                 tool_call (tool_id, tool_name, parameters)
//	tool_result              tool_result (output; error when status is "error",
//	                         the text then error.message)
//	error                    notice/<severity> (warning or error; the CLI goes on)
//	result, status success   usage (stats), finished (the answer, stop end_turn)
//	result, status error     usage, failure (error.message; details: error_type),
//	                         finished (stop error)
type Decoder struct {
	answer strings.Builder
	msg    int  // the current message's number
	open   bool // a message is being streamed
}

// NewDecoder returns a decoder for one turn.
func NewDecoder() *Decoder { return &Decoder{} }

// maxAnswer bounds the answer the decoder keeps.
const maxAnswer = 16 << 20

// Decode decodes one line. A line it does not understand gives no events.
func (d *Decoder) Decode(line []byte) []harness.Event {
	o := kit.Parse(line)
	if o == nil {
		return nil
	}
	switch o.Str("type") {
	case "init":
		if id := o.Str("session_id"); id != "" {
			return []harness.Event{{Type: harness.EventSession, Session: id}}
		}
	case "message":
		return d.message(o)
	case "tool_use":
		d.open = false
		d.answer.Reset()
		return []harness.Event{{Type: harness.EventToolCall, Tool: &harness.Tool{
			ID: o.Str("tool_id"), Name: o.Str("tool_name"), Input: o.Raw("parameters"),
		}}}
	case "tool_result":
		t := &harness.Tool{ID: o.Str("tool_id"), Output: o.Str("output"), Error: o.Str("status") == "error"}
		if msg := o.Obj("error").Str("message"); t.Error && t.Output == "" {
			t.Output = msg
		}
		return []harness.Event{{Type: harness.EventToolResult, Tool: t}}
	case "error":
		sev := o.Str("severity")
		if sev == "" {
			sev = "error"
		}
		if text := o.Str("message"); text != "" {
			return []harness.Event{{Type: harness.EventNotice, Kind: sev, Text: text}}
		}
	case "result":
		return d.result(o)
	}
	return nil
}

func (d *Decoder) message(o kit.Obj) []harness.Event {
	if o.Str("role") != "assistant" {
		return nil
	}
	text := o.Str("content")
	if text == "" {
		return nil
	}
	if !d.open {
		d.open = true
		d.msg++
	}
	if d.answer.Len()+len(text) <= maxAnswer {
		d.answer.WriteString(text)
	}
	return []harness.Event{{Type: harness.EventMessage, Text: text, Delta: o.Flag("delta"), ID: "m" + strconv.Itoa(d.msg)}}
}

func (d *Decoder) result(o kit.Obj) []harness.Event {
	var evs []harness.Event
	if u := StatsUsage(o.Obj("stats")); u != nil {
		evs = append(evs, harness.Event{Type: harness.EventUsage, Usage: u})
	}
	if o.Str("status") == "success" {
		text := d.answer.String()
		evs = append(evs, harness.Event{Type: harness.EventFinished, Text: text, Stop: "end_turn"})
		return evs
	}
	e := o.Obj("error")
	msg := e.Str("message")
	if msg == "" {
		msg = "gemini: the turn ended with status " + strconv.Quote(o.Str("status"))
	}
	evs = append(evs,
		harness.Event{Type: harness.EventFailure, Text: msg, Details: kit.Strs("error_type", e.Str("type"))},
		harness.Event{Type: harness.EventFinished, Stop: "error"})
	return evs
}

// StatsUsage converts a result's stats: input tokens are the prompt's
// tokens that were not cached ("input"), cache reads "cached", output
// every generated token (total_tokens - input_tokens: candidates and
// thoughts, which output_tokens leaves out). The stats count every model
// call of the turn, the model router's included. Complete only when all
// four counters are present. Nil without stats.
func StatsUsage(s kit.Obj) *harness.Usage {
	if s == nil {
		return nil
	}
	prompt, okP := s.Num("input_tokens")
	total, okT := s.Num("total_tokens")
	cached, okC := s.Num("cached")
	input, okI := s.Num("input")
	out, okO := s.Num("output_tokens")
	if !okP && !okO {
		return nil
	}
	u := harness.Usage{Complete: okP && okT && okC && okI}
	u.CacheReadTokens = max(cached, 0)
	if okI {
		u.InputTokens = max(input, 0)
	} else {
		u.InputTokens = max(prompt-cached, 0)
	}
	if okT && okP {
		u.OutputTokens = max(total-prompt, 0)
	} else {
		u.OutputTokens = max(out, 0)
	}
	return &u
}
