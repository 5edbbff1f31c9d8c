package antigravity

import (
	"fmt"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// Decoder turns agy's --output-format stream-json lines (NDJSON keyed by
// "event") into normalized events:
//
//	init                          session (details: model, cwd, permission_mode)
//	step_update agent_response    message deltas (text_delta); a complete
//	                              message when the step is DONE
//	step_update tool              tool_call when the step starts, tool_result
//	                              when it is DONE (error when tool_info.error
//	                              is set)
//	step_update (other types)     reasoning deltas for thinking steps, else
//	                              nothing
//	result SUCCESS                finished (text: response; usage), or, with
//	                              an empty response and denied_actions, a
//	                              failure of kind permission_denied first
//	result ERROR                  failure (kind error), then finished (stop
//	                              error)
//	result WAITING                failure (kind waiting), then finished
//
// A decoder made for a resumed turn (NewDecoder with the conversation id)
// also checks that the CLI resumed it: agy answers an unknown
// --conversation with a warning and a new conversation, exit 0. That gives
// a failure of kind resume_lost, and no session event for the new id, so
// the stored conversation keeps its own. It never panics, whatever the
// input; use one per turn.
type Decoder struct {
	resume  string // the conversation the turn must continue, "" for a new one
	session string // the conversation id seen, once known
	lost    bool   // the CLI started another conversation
	steps   map[int64]*step
}

type step struct {
	text    strings.Builder
	called  bool
	done    bool
	isTool  bool
	toolKey string
}

// maxSteps bounds the decoder's memory, whatever the input.
const maxSteps = 4096

// NewDecoder returns a decoder for one turn; resume is the conversation id
// the turn continues ("" for a new conversation).
func NewDecoder(resume string) *Decoder {
	return &Decoder{resume: resume, steps: map[int64]*step{}}
}

// Decode decodes one line. A line it does not understand gives no events.
func (d *Decoder) Decode(line []byte) []harness.Event {
	o := parseObj(line)
	if o == nil {
		return nil
	}
	switch o.Str("event") {
	case "init":
		init := o.Obj("init")
		id := o.Str("conversation_id")
		if id == "" && init != nil {
			id = init.Str("conversation_id")
		}
		det := kit.Strs("model", init.Str("model"), "cwd", init.Str("cwd"), "permission_mode", init.Str("permission_mode"))
		return d.conversation(id, det)
	case "step_update":
		su := o.Obj("step_update")
		if su == nil {
			return nil
		}
		evs := d.conversation(su.Str("conversation_id"), nil)
		return append(evs, d.step(su)...)
	case "result":
		r := o.Obj("result")
		if r == nil {
			return nil
		}
		evs := d.conversation(r.Str("conversation_id"), nil)
		return append(evs, d.result(r)...)
	}
	return nil
}

// conversation handles the conversation id a line carries: the first one
// gives the session event, or, for a resumed turn that got another id, the
// resume_lost failure.
func (d *Decoder) conversation(id string, det map[string]any) []harness.Event {
	if id == "" || d.session != "" {
		return nil
	}
	d.session = id
	if d.resume != "" && id != d.resume {
		d.lost = true
		return []harness.Event{{
			Type: harness.EventFailure, Kind: "resume_lost",
			Text:    fmt.Sprintf("agy did not resume conversation %s: it started a new conversation %s (it does that when it cannot find the one asked for)", d.resume, id),
			Details: map[string]any{"resume": d.resume, "started": id},
		}}
	}
	return []harness.Event{{Type: harness.EventSession, Session: id, Details: det}}
}

func (d *Decoder) step(su obj) []harness.Event {
	idx, ok := su.Num("step_index")
	if !ok {
		return nil
	}
	st := d.steps[idx]
	if st == nil {
		if len(d.steps) >= maxSteps {
			return nil
		}
		st = &step{}
		d.steps[idx] = st
	}
	id := fmt.Sprintf("step-%d", idx)
	state := su.Str("state")
	typ := su.Str("step_type")
	info := su.Obj("tool_info")
	var evs []harness.Event
	switch {
	case typ == "tool" || (info != nil && typ != "agent_response"):
		st.isTool = true
		name := info.Str("name")
		if name == "" {
			name = su.Str("tool_name")
		}
		if !st.called {
			st.called = true
			evs = append(evs, harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: name, Input: harness.SafeJSON(info.Raw("parameters"))}})
		}
		if state == "DONE" && !st.done {
			st.done = true
			t := &harness.Tool{ID: id, Name: name, Output: info.Str("output")}
			if e := errorText(info, "error"); e != "" {
				t.Error = true
				if t.Output == "" {
					t.Output = e
				}
			}
			evs = append(evs, harness.Event{Type: harness.EventToolResult, Tool: t})
		}
	case typ == "agent_response" || typ == "":
		if delta := su.Str("text_delta"); delta != "" && !st.done {
			if st.text.Len() < 64<<20 {
				st.text.WriteString(delta)
			}
			evs = append(evs, harness.Event{Type: harness.EventMessage, ID: id, Text: delta, Delta: true})
		}
		if state == "DONE" && !st.done {
			st.done = true
			if st.text.Len() > 0 {
				evs = append(evs, harness.Event{Type: harness.EventMessage, ID: id, Text: st.text.String()})
			}
		}
	case strings.Contains(typ, "think") || strings.Contains(typ, "reason"):
		if delta := su.Str("text_delta"); delta != "" {
			evs = append(evs, harness.Event{Type: harness.EventReasoning, ID: id, Text: delta, Delta: true})
		}
	}
	return evs
}

func (d *Decoder) result(r obj) []harness.Event {
	status := r.Str("status")
	response := r.Str("response")
	fin := harness.Event{Type: harness.EventFinished, Text: response, Stop: "end_turn"}
	det := map[string]any{}
	if status != "" {
		det["status"] = status
	}
	if n, ok := r.Num("num_turns"); ok {
		det["num_turns"] = n
	}
	if len(det) > 0 {
		fin.Details = det
	}
	if u := r.Obj("usage"); u != nil {
		if usage, ok := usageOf(u); ok {
			fin.Usage = &usage
		}
	}
	var evs []harness.Event
	denied := deniedList(r)
	switch {
	case status == "ERROR":
		text := errorText(r, "error")
		if text == "" {
			text = "agy reported an error"
		}
		evs = append(evs, harness.Event{Type: harness.EventFailure, Kind: "error", Text: text, Details: errorDetails(r)})
		fin.Stop = "error"
	case status == "WAITING":
		evs = append(evs, harness.Event{Type: harness.EventFailure, Kind: "waiting", Text: "agy stopped to wait for input, which print mode cannot give"})
		fin.Stop = "waiting"
	case strings.TrimSpace(response) == "" && len(denied) > 0:
		evs = append(evs, harness.Event{Type: harness.EventFailure, Kind: "permission_denied",
			Text:    "agy denied actions that needed approval and gave no answer: " + strings.Join(denied, "; "),
			Details: map[string]any{"denied_actions": denied}})
		fin.Stop = "permission_denied"
	}
	return append(evs, fin)
}

// deniedList renders result.denied_actions (objects or strings) as short
// texts.
func deniedList(r obj) []string {
	a, _ := r["denied_actions"].([]any)
	var out []string
	for _, e := range a {
		if len(out) == 20 {
			out = append(out, fmt.Sprintf("and %d more", len(a)-20))
			break
		}
		switch x := e.(type) {
		case string:
			out = append(out, clip(x, 200))
		case map[string]any:
			o := obj(x)
			s := o.Str("tool_name")
			if s == "" {
				s = o.Str("name")
			}
			if s == "" {
				s = clip(string(harness.SafeJSON(o.Raw("parameters"))), 200)
			}
			if s == "" {
				s = "an action"
			}
			out = append(out, s)
		}
	}
	return out
}

// errorText reads field k as an error: a string, or an object's message
// (short_error, message, error).
func errorText(o obj, k string) string {
	switch x := o[k].(type) {
	case string:
		return x
	case map[string]any:
		e := obj(x)
		for _, f := range []string{"short_error", "message", "error"} {
			if s := e.Str(f); s != "" {
				return s
			}
		}
		if s := e.Str("status"); s != "" {
			return s
		}
	}
	return ""
}

func errorDetails(r obj) map[string]any {
	e := r.Obj("error")
	if e == nil {
		return nil
	}
	det := kit.Details{}
	det.Str("status", e.Str("status"))
	n, ok := e.Num("error_code")
	det.Num("error_code", n, ok)
	b, ok := e.Bool("retryable")
	det.Bool("retryable", b, ok)
	return det.Map()
}

// usageOf converts result.usage. agy's input_tokens are taken as the
// uncached input (the published sample reports cache reads larger than
// input, so they cannot include them); it reports no cache-write counter.
// Complete needs input, output and cache-read counters.
func usageOf(u obj) (harness.Usage, bool) {
	in, okIn := u.Num("input_tokens")
	out, okOut := u.Num("output_tokens")
	cr, okCR := u.Num("cache_read_tokens")
	if !okIn && !okOut {
		return harness.Usage{}, false
	}
	return harness.Usage{InputTokens: max(in, 0), OutputTokens: max(out, 0), CacheReadTokens: max(cr, 0), Complete: okIn && okOut && okCR}, true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
