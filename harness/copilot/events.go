package copilot

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Decoder turns the CLI's --output-format json lines (one JSON object per
// line, keyed by "type") into normalized events. It keeps the state a line
// alone does not give: the last complete answer (the final event's text),
// the messages whose deltas a retry voids, tool names by call id, the last
// failed model call (folded into the retry notice that follows it), and
// running usage totals. Use one Decoder per turn; it is not safe for
// concurrent use. It never panics, whatever the input.
//
// Mapping (see docs/presets/copilot.md):
//
//	assistant.message_delta        message, delta (id: messageId)
//	assistant.message              message (content, when not empty), then
//	                               tool_call per toolRequests entry
//	assistant.reasoning_delta      reasoning, delta (id: reasoningId)
//	assistant.reasoning            reasoning
//	tool.execution_start           tool_call, unless toolRequests named it
//	tool.execution_complete        tool_result (error when success is false)
//	assistant.usage                usage (running total of the turn)
//	assistant.turn_retry           notice/retry (details: reason, attempt,
//	                               status_code, discard: message ids whose
//	                               deltas the retry voids)
//	session.error                  failure/<errorType> (details: error_type,
//	                               status_code, error_code, resets_at,
//	                               limit: rate or quota, discard)
//	session.warning, session.info  notice/warning, notice/info
//	abort                          notice/abort
//	result                         finished (text: the last answer; stop
//	                               end_turn, or error for a non-zero exitCode)
//
// Everything else (session setup, turn boundaries, model call telemetry,
// background tasks, the echoed user message) gives no event.
type Decoder struct {
	last     string          // content of the last top-level assistant message
	open     []string        // message ids with deltas and no complete message yet
	openSet  map[string]bool //
	tools    map[string]string
	attempts map[string]int // retries per turn id
	failure  obj            // data of the last model.call_failure
	usage    *harness.Usage // running total of assistant.usage lines
}

// NewDecoder returns a decoder for one turn.
func NewDecoder() *Decoder {
	return &Decoder{openSet: map[string]bool{}, tools: map[string]string{}, attempts: map[string]int{}}
}

// maxTracked bounds the decoder's maps, whatever the input.
const maxTracked = 4096

// Decode decodes one line. A line it does not understand gives no events.
func (d *Decoder) Decode(line []byte) []harness.Event {
	o := parseObj(line)
	if o == nil {
		return nil
	}
	data := o.Obj("data")
	if data == nil {
		data = obj{}
	}
	switch o.Str("type") {
	case "assistant.message_delta":
		id, text := data.Str("messageId"), data.Str("deltaContent")
		if text == "" {
			return nil
		}
		if id != "" && !d.openSet[id] && len(d.openSet) < maxTracked {
			d.openSet[id] = true
			d.open = append(d.open, id)
		}
		return []harness.Event{{Type: harness.EventMessage, ID: id, Text: text, Delta: true}}
	case "assistant.message":
		return d.message(data)
	case "assistant.reasoning_delta":
		if text := data.Str("deltaContent"); text != "" {
			return []harness.Event{{Type: harness.EventReasoning, ID: data.Str("reasoningId"), Text: text, Delta: true}}
		}
	case "assistant.reasoning":
		if text := data.Str("content"); text != "" {
			return []harness.Event{{Type: harness.EventReasoning, ID: data.Str("reasoningId"), Text: text}}
		}
	case "tool.execution_start":
		id := data.Str("toolCallId")
		if id != "" {
			if _, seen := d.tools[id]; seen {
				return nil
			}
		}
		name := data.Str("toolName")
		d.remember(id, name)
		return []harness.Event{toolCall(id, name, data.Raw("arguments"), data)}
	case "tool.execution_complete":
		return []harness.Event{d.toolResult(data)}
	case "assistant.usage":
		return d.addUsage(data)
	case "model.call_failure":
		d.failure = data
	case "assistant.turn_retry":
		return []harness.Event{d.retry(data)}
	case "session.error":
		ev := failure(data, o.Str("timestamp"))
		if len(d.open) > 0 {
			// The failed attempt's deltas never complete.
			ev.Details["discard"] = d.open
			d.open, d.openSet = nil, map[string]bool{}
		}
		return []harness.Event{ev}
	case "session.warning":
		if msg := data.Str("message"); msg != "" {
			return []harness.Event{{Type: harness.EventNotice, Kind: "warning", Text: msg, Details: kit.Strs("warning_type", data.Str("warningType"), "url", data.Str("url"))}}
		}
	case "session.info":
		if msg := data.Str("message"); msg != "" {
			return []harness.Event{{Type: harness.EventNotice, Kind: "info", Text: msg, Details: kit.Strs("info_type", data.Str("infoType"))}}
		}
	case "abort":
		reason := data.Str("reason")
		return []harness.Event{{Type: harness.EventNotice, Kind: "abort", Text: "the turn was aborted: " + reason, Details: kit.Strs("reason", reason)}}
	case "result":
		return []harness.Event{d.finished(o)}
	}
	return nil
}

func (d *Decoder) message(data obj) []harness.Event {
	id := data.Str("messageId")
	d.close(id)
	var evs []harness.Event
	content := data.Str("content")
	parent := data.Str("parentToolCallId")
	if content != "" {
		ev := harness.Event{Type: harness.EventMessage, ID: id, Text: content}
		if parent != "" {
			// A sub-agent's message: not the turn's answer.
			ev.Details = kit.Strs("parent_tool_call_id", parent)
		} else {
			d.last = content
		}
		evs = append(evs, ev)
	}
	for _, r := range data.Objs("toolRequests") {
		tid, name := r.Str("toolCallId"), r.Str("name")
		d.remember(tid, name)
		evs = append(evs, toolCall(tid, name, r.Raw("arguments"), data))
	}
	return evs
}

func toolCall(id, name string, args json.RawMessage, data obj) harness.Event {
	ev := harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: name, Input: harness.SafeJSON(args)}}
	if p := data.Str("parentToolCallId"); p != "" {
		ev.Details = kit.Strs("parent_tool_call_id", p)
	}
	return ev
}

func (d *Decoder) remember(id, name string) {
	if id != "" && len(d.tools) < maxTracked {
		d.tools[id] = name
	}
}

func (d *Decoder) toolResult(data obj) harness.Event {
	id := data.Str("toolCallId")
	ok, _ := data.Bool("success")
	t := &harness.Tool{ID: id, Name: d.tools[id], Error: !ok}
	if r := data.Obj("result"); r != nil {
		t.Output = r.Str("content")
	}
	if e := data.Obj("error"); e != nil && t.Output == "" {
		t.Output = e.Str("message")
	}
	ev := harness.Event{Type: harness.EventToolResult, Tool: t}
	det := map[string]any{}
	if sh := data.Obj("shellExecution"); sh != nil {
		if code, ok := sh.Num("exitCode"); ok {
			det["exit_code"] = code
		}
	}
	if e := data.Obj("error"); e != nil && e.Str("code") != "" {
		det["error_code"] = e.Str("code")
	}
	if p := data.Str("parentToolCallId"); p != "" {
		det["parent_tool_call_id"] = p
	}
	if len(det) > 0 {
		ev.Details = det
	}
	return ev
}

// close forgets an open message: it is complete now.
func (d *Decoder) close(id string) {
	if !d.openSet[id] {
		return
	}
	delete(d.openSet, id)
	for i, o := range d.open {
		if o == id {
			d.open = append(d.open[:i], d.open[i+1:]...)
			break
		}
	}
}

// retry is the notice of assistant.turn_retry. The deltas of messages that
// never completed belong to the failed attempt and must be discarded: they
// are listed in details.discard and forgotten. The notice's text names the
// HTTP status of the failed call, never its error message (kept in
// details.error), so it cannot be taken for the terminal failure.
func (d *Decoder) retry(data obj) harness.Event {
	turn, reason := data.Str("turnId"), data.Str("reason")
	if len(d.attempts) < maxTracked || d.attempts[turn] > 0 {
		d.attempts[turn]++
	}
	attempt := d.attempts[turn]
	det := map[string]any{"attempt": attempt}
	if reason != "" {
		det["reason"] = reason
	}
	text := fmt.Sprintf("the model call failed; retrying (attempt %d", attempt)
	if reason != "" {
		text += ", " + reason
	}
	if f := d.failure; f != nil {
		if code, ok := f.Num("statusCode"); ok {
			det["status_code"] = code
			text += fmt.Sprintf(", HTTP %d", code)
		}
		if k := f.Str("failureKind"); k != "" {
			det["failure_kind"] = k
		}
		if m := providerMessage(f.Str("errorMessage")); m != "" {
			det["error"] = m
		}
		d.failure = nil
	}
	text += ")"
	if len(d.open) > 0 {
		det["discard"] = d.open
		d.open = nil
		d.openSet = map[string]bool{}
	}
	return harness.Event{Type: harness.EventNotice, Kind: "retry", Text: text, Details: det}
}

// providerMessage extracts error.message (or message) from a provider's
// raw JSON error, else returns the text itself, at most 1 KiB.
func providerMessage(s string) string {
	if o := parseObj([]byte(s)); o != nil {
		if m := o.Obj("error").Str("message"); m != "" {
			s = m
		} else if m := o.Str("message"); m != "" {
			s = m
		}
	}
	s = strings.TrimSpace(s)
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:1024], "") + "…"
	}
	return s
}

// failureMarker is the line failure texts end with: it carries the CLI's
// error type into the text, where Quota and Unavailable read it.
const failureMarker = "(copilot error type: "

var typeRE = lazyre.New(`^[a-z][a-z0-9_]{0,63}$`)

// failure is the event of session.error: its text is the CLI's message
// followed by a line "(copilot error type: T[, HTTP N][, code C])".
func failure(data obj, timestamp string) harness.Event {
	msg := strings.TrimSpace(data.Str("message"))
	if msg == "" {
		msg = "the agent reported an error"
	}
	typ := data.Str("errorType")
	if !typeRE.MatchString(typ) {
		typ = "unknown"
	}
	det := kit.Details{"error_type": typ}
	marker := failureMarker + typ
	if code, ok := data.Num("statusCode"); ok {
		det["status_code"] = code
		marker += fmt.Sprintf(", HTTP %d", code)
	}
	if c := data.Str("errorCode"); c != "" {
		det["error_code"] = c
		if typeRE.MatchString(c) {
			marker += ", code " + c
		}
	}
	for k, f := range map[string]string{"provider_error_type": "providerErrorType", "remediation": "remediation", "url": "url"} {
		det.Str(k, data.Str(f))
	}
	v, ok := data.Bool("eligibleForAutoSwitch")
	det.Bool("eligible_for_auto_switch", v, ok)
	if typ == "rate_limit" || typ == "quota" {
		// BYOK reports a provider's exhausted quota as rate_limit too;
		// only the text tells them apart.
		det["limit"] = "rate"
		if typ == "quota" || strings.Contains(msg, "exceeded your current quota") || strings.Contains(msg, "insufficient_quota") ||
			strings.Contains(msg, "AI credits") || strings.Contains(msg, "spending limit") || strings.Contains(msg, "usage limit") {
			det["limit"] = "quota"
		}
		at, err := time.Parse(time.RFC3339Nano, timestamp)
		if err != nil {
			at = time.Now()
		}
		det.Str("resets_at", resetsAt(msg, at))
	}
	return harness.Event{Type: harness.EventFailure, Kind: typ, Text: msg + "\n" + marker + ")", Details: det}
}

func (d *Decoder) addUsage(data obj) []harness.Event {
	u, ok := recordUsage(data)
	if !ok {
		return nil
	}
	if d.usage == nil {
		d.usage = &u
	} else {
		*d.usage = d.usage.Add(u)
	}
	total := *d.usage
	return []harness.Event{{Type: harness.EventUsage, Usage: &total}}
}

func (d *Decoder) finished(o obj) harness.Event {
	ev := harness.Event{Type: harness.EventFinished, Text: d.last, Stop: "end_turn"}
	det := map[string]any{}
	if code, ok := o.Num("exitCode"); ok {
		det["exit_code"] = code
		if code != 0 {
			ev.Stop = "error"
		}
	}
	if s := o.Str("sessionId"); s != "" {
		det["session_id"] = s
	}
	if u := o.Obj("usage"); u != nil {
		if n, ok := u.Num("premiumRequests"); ok {
			det["premium_requests"] = n
		}
		if n, ok := u.Num("totalApiDurationMs"); ok {
			det["api_duration_ms"] = n
		}
		if c := u.Obj("codeChanges"); c != nil {
			if n, ok := c.Num("linesAdded"); ok {
				det["lines_added"] = n
			}
			if n, ok := c.Num("linesRemoved"); ok {
				det["lines_removed"] = n
			}
		}
	}
	if d.usage != nil {
		u := *d.usage
		ev.Usage = &u
	}
	if len(det) > 0 {
		ev.Details = det
	}
	return ev
}
