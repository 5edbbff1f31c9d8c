package claude

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// SyntheticModel is the model name of the assistant line the CLI writes
// for an API error instead of a model reply.
const SyntheticModel = "<synthetic>"

// Events decodes one line of `claude -p --output-format stream-json
// --verbose` output on its own, without the context of earlier lines (the
// engine uses the stateful decoder of Harness().NewDecoder, which also
// numbers content blocks, sums usage over the results of a live session
// and reports each failure once). It never panics; lines that are not JSON
// objects, and types it does not know, give no events.
//
// Line types (type/subtype), and what they become:
//
//	system/init                 session (native id; details: model, cwd, permission_mode, version)
//	assistant text|thinking     message | reasoning (ID: the API message id)
//	assistant tool_use          tool_call
//	assistant "<synthetic>"     failure (the CLI's API error; kind: its error, details: status, resets_at)
//	user tool_result            tool_result
//	user "[Request interrupted" notice (kind interrupted); isSynthetic: notice (kind synthetic); replays: none
//	result                      finished (text, stop, usage) | failure + usage when is_error or error_*
//	system/api_retry            notice (kind retry; never terminal)
//	rate_limit_event            notice (kind rate_limit; details: status, resets_at)
//	system/permission_denied    notice (kind permission_denied, tool)
//	system/task_*               notice (kind task)
//	system/compact_boundary     notice (kind compact)
//	stream_event text/thinking  message | reasoning deltas (with --include-partial-messages)
//	system/status, system/thinking_tokens, control_response, command_lifecycle, others: none
func Events(line []byte) []harness.Event {
	d := newDecoder()
	d.stateless = true
	return d.decode(line)
}

// decoder is the stateful decoder of one turn's output.
type decoder struct {
	stateless bool

	session string // last session id announced
	failed  bool   // a failure was reported in the current CLI turn
	running bool   // a CLI turn started (init) and has no result yet
	results int
	usage   harness.Usage // sum over the results

	// Content block numbering: the block index open in each API message
	// (partial messages), else the number of blocks seen per message.
	open   map[string]int
	blocks map[string]int

	rejected map[string]any // details of the last rejected rate_limit_event

	// interrupting: an interrupt was requested (Live.Interrupt), so the
	// aborted result that follows is not a failure.
	interrupting bool
}

func newDecoder() *decoder {
	return &decoder{open: map[string]int{}, blocks: map[string]int{}}
}

// maxBlocksTracked bounds the block numbering maps of one turn.
const maxBlocksTracked = 10_000

func (d *decoder) decode(line []byte) []harness.Event {
	return kit.Guard(line, "claude", "output line", func() []harness.Event { return d.decodeObj(parseObj(line)) })
}

// decodeObj decodes a parsed line (nil: not a JSON object).
func (d *decoder) decodeObj(o obj) []harness.Event {
	if o == nil {
		return nil
	}
	switch o.Str("type") {
	case "system":
		return d.system(o)
	case "assistant":
		return d.assistant(o)
	case "user":
		return d.user(o)
	case "result":
		return d.result(o)
	case "rate_limit_event":
		return d.rateLimit(o)
	case "stream_event":
		return d.streamEvent(o)
	}
	return nil
}

func (d *decoder) system(o obj) []harness.Event {
	switch o.Str("subtype") {
	case "init":
		d.running, d.failed = true, false
		id := o.Str("session_id")
		if id == "" || (!d.stateless && id == d.session) {
			return nil
		}
		d.session = id
		details := map[string]any{}
		for k, name := range map[string]string{"model": "model", "cwd": "cwd", "permissionMode": "permission_mode", "claude_code_version": "version"} {
			if v := o.Str(k); v != "" {
				details[name] = v
			}
		}
		return []harness.Event{{Type: harness.EventSession, Session: id, Details: details}}
	case "api_retry":
		attempt, _ := o.Num("attempt")
		max, _ := o.Num("max_retries")
		delay, _ := o.Num("retry_delay_ms")
		kind := o.Str("error")
		status, hasStatus := o.Num("error_status")
		what := kind
		if hasStatus {
			what = strconv.FormatInt(status, 10) + " " + kind
		}
		if what == "" {
			what = "unknown error"
		}
		details := map[string]any{"attempt": attempt, "max_retries": max, "retry_delay_ms": delay}
		if kind != "" {
			details["error"] = kind
		}
		if hasStatus {
			details["error_status"] = status
		}
		text := fmt.Sprintf("API request failed (%s); retrying in %s, attempt %d of %d", strings.TrimSpace(what), time.Duration(delay)*time.Millisecond, attempt, max)
		return []harness.Event{{Type: harness.EventNotice, Kind: "retry", Text: text, Details: details}}
	case "permission_denied":
		ev := harness.Event{Type: harness.EventNotice, Kind: "permission_denied", Text: o.Str("message")}
		if id, name := o.Str("tool_use_id"), o.Str("tool_name"); id != "" || name != "" {
			ev.Tool = &harness.Tool{ID: id, Name: name}
		}
		if ev.Text == "" {
			ev.Text = "permission denied"
		}
		return []harness.Event{ev}
	case "task_started", "task_notification", "task_progress":
		status := o.Str("status")
		if status == "" && o.Str("subtype") == "task_started" {
			status = "started"
		}
		text := o.Str("summary")
		if text == "" {
			text = o.Str("description")
		}
		details := map[string]any{}
		for _, k := range []string{"task_id", "task_type"} {
			if v := o.Str(k); v != "" {
				details[k] = v
			}
		}
		if status != "" {
			details["status"] = status
		}
		ev := harness.Event{Type: harness.EventNotice, Kind: "task", Text: text, Details: details}
		if id := o.Str("tool_use_id"); id != "" {
			ev.Tool = &harness.Tool{ID: id}
		}
		return []harness.Event{ev}
	case "compact_boundary":
		return []harness.Event{{Type: harness.EventNotice, Kind: "compact", Text: "the conversation was compacted"}}
	}
	return nil
}

// blockID returns the event ID of a content block of API message msg: the
// message id and the block's index in it.
func (d *decoder) blockID(msg string) string {
	if d.stateless || msg == "" {
		return msg
	}
	if i, ok := d.open[msg]; ok {
		return msg + ":" + strconv.Itoa(i)
	}
	i := d.blocks[msg]
	if len(d.blocks) < maxBlocksTracked || i > 0 {
		d.blocks[msg] = i + 1
	}
	return msg + ":" + strconv.Itoa(i)
}

func (d *decoder) assistant(o obj) []harness.Event {
	msg := o.Obj("message")
	if msg == nil {
		return nil
	}
	if msg.Str("model") == SyntheticModel || o.Str("error") != "" || o.Flag("is_api_error_message") {
		return d.apiError(o, msg)
	}
	id := msg.Str("id")
	var common map[string]any
	if p := o.Str("parent_tool_use_id"); p != "" {
		common = map[string]any{"parent_tool_use_id": p}
	}
	if o.Flag("aborted") {
		if common == nil {
			common = map[string]any{}
		}
		common["aborted"] = true
	}
	var evs []harness.Event
	for _, b := range msg.Objs("content") {
		bid := d.blockID(id)
		var ev harness.Event
		switch t := b.Str("type"); t {
		case "text":
			ev = harness.Event{Type: harness.EventMessage, ID: bid, Text: b.Str("text")}
		case "thinking":
			ev = harness.Event{Type: harness.EventReasoning, ID: bid, Text: b.Str("thinking")}
		case "redacted_thinking":
			ev = harness.Event{Type: harness.EventReasoning, ID: bid, Details: map[string]any{"redacted": true}}
		case "tool_use", "server_tool_use", "mcp_tool_use":
			ev = harness.Event{Type: harness.EventToolCall, ID: bid, Tool: &harness.Tool{ID: b.Str("id"), Name: b.Str("name"), Input: raw(b, "input")}}
			if t != "tool_use" {
				ev.Details = map[string]any{"tool_type": t}
			}
		default:
			if strings.HasSuffix(t, "_tool_result") {
				ev = harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: b.Str("tool_use_id"), Output: contentText(b["content"]), Error: b.Flag("is_error")}}
				break
			}
			continue
		}
		for k, v := range common {
			if ev.Details == nil {
				ev.Details = map[string]any{}
			}
			ev.Details[k] = v
		}
		evs = append(evs, ev)
	}
	return evs
}

// apiError decodes the CLI's synthetic assistant line for an API error.
func (d *decoder) apiError(o, msg obj) []harness.Event {
	text := strings.TrimSpace(contentText(msg["content"]))
	if text == "" {
		text = "API error"
	}
	kind := o.Str("error")
	if kind == "" {
		kind = "api_error"
	}
	details := map[string]any{}
	if status, ok := o.Num("api_error_status"); ok {
		details["api_error_status"] = status
	}
	for _, k := range []string{"api_error_type", "api_error"} {
		if v := o.Str(k); v != "" {
			details[k] = v
		}
	}
	if params := o.Obj("api_error_params"); params != nil {
		if info := params.Obj("rate_limit_info"); info != nil {
			kit.Details(details).Merge(rateLimitDetails(info), "status")
		}
	}
	if _, ok := details["resets_at"]; !ok {
		kit.Details(details).Merge(d.rejected, "status")
	}
	d.failed = true
	return []harness.Event{{Type: harness.EventFailure, Kind: kind, Text: text, Details: details}}
}

func (d *decoder) user(o obj) []harness.Event {
	if o.Flag("isReplay") {
		return nil
	}
	msg := o.Obj("message")
	if msg == nil {
		return nil
	}
	synthetic := o.Flag("isSynthetic")
	if content, ok := msg["content"].(string); ok {
		if synthetic {
			return []harness.Event{{Type: harness.EventNotice, Kind: "synthetic", Text: content}}
		}
		return nil
	}
	var evs []harness.Event
	for _, b := range msg.Objs("content") {
		switch b.Str("type") {
		case "tool_result":
			evs = append(evs, harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: b.Str("tool_use_id"), Output: contentText(b["content"]), Error: b.Flag("is_error")}})
		case "text":
			t := b.Str("text")
			switch {
			case strings.HasPrefix(t, "[Request interrupted by user"):
				evs = append(evs, harness.Event{Type: harness.EventNotice, Kind: "interrupted", Text: t})
			case synthetic:
				evs = append(evs, harness.Event{Type: harness.EventNotice, Kind: "synthetic", Text: t})
			}
		}
	}
	return evs
}

// Usage reads an API usage object (result.usage, a session line's
// message.usage). Complete is true when all four counters are present.
func Usage(u obj) (harness.Usage, bool) {
	if u == nil {
		return harness.Usage{}, false
	}
	in, ok1 := u.Num("input_tokens")
	out, ok2 := u.Num("output_tokens")
	cr, ok3 := u.Num("cache_read_input_tokens")
	cw, ok4 := u.Num("cache_creation_input_tokens")
	if !ok1 && !ok2 && !ok3 && !ok4 {
		return harness.Usage{}, false
	}
	return harness.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw, Complete: ok1 && ok2 && ok3 && ok4}, true
}

func (d *decoder) result(o obj) []harness.Event {
	d.running = false
	sum := d.resultUsage(o)
	subtype := o.Str("subtype")
	stop := o.Str("stop_reason")
	terminal := o.Str("terminal_reason")
	details := resultDetails(o, subtype, terminal)
	failed := o.Flag("is_error") || strings.HasPrefix(subtype, "error")
	wasFailed := d.failed
	d.failed = false
	if !failed {
		d.interrupting = false
		return []harness.Event{{Type: harness.EventFinished, Text: o.Str("result"), Stop: stop, Usage: sum, Details: details}}
	}
	if d.interrupting && (terminal == "aborted_streaming" || terminal == "aborted_tools" || subtype == "error_during_execution") {
		d.interrupting = false
		details["interrupted"] = true
		return []harness.Event{{Type: harness.EventFinished, Stop: "interrupted", Usage: sum, Details: details}}
	}
	var evs []harness.Event
	if !wasFailed || d.stateless {
		evs = append(evs, d.resultFailure(o, subtype, terminal, details))
	}
	if sum != nil {
		evs = append(evs, harness.Event{Type: harness.EventUsage, Usage: sum})
	}
	return evs
}

// resultUsage adds a result's usage to the turn's (a stateless decoder,
// or the first result, replaces it) and returns the running sum, or nil
// when the result reports none.
func (d *decoder) resultUsage(o obj) *harness.Usage {
	u, ok := Usage(o.Obj("usage"))
	if !ok {
		return nil
	}
	if d.results == 0 || d.stateless {
		d.usage = u
	} else {
		d.usage = d.usage.Add(u)
	}
	d.results++
	s := d.usage
	return &s
}

// resultDetails are the facts a result line reports beside its text.
func resultDetails(o obj, subtype, terminal string) map[string]any {
	details := map[string]any{}
	if subtype != "" {
		details["subtype"] = subtype
	}
	if terminal != "" {
		details["terminal_reason"] = terminal
	}
	if n, ok := o.Num("num_turns"); ok {
		details["num_turns"] = n
	}
	if n, ok := o.Num("duration_ms"); ok {
		details["duration_ms"] = n
	}
	if c, ok := o.Float("total_cost_usd"); ok {
		// Cumulative over the session, including resumed and forked-from
		// turns: never sum it over turns.
		details["session_cost_usd"] = c
	}
	if n := len(o.Arr("permission_denials")); n > 0 {
		details["permission_denials"] = n
	}
	return details
}

// resultFailure is the failure event of a result that reports an error:
// its text, else its errors, else what it ended with.
func (d *decoder) resultFailure(o obj, subtype, terminal string, details map[string]any) harness.Event {
	text := strings.TrimSpace(o.Str("result"))
	if text == "" {
		var errs []string
		for _, e := range o.Arr("errors") {
			if s := strings.TrimSpace(contentText(e)); s != "" {
				errs = append(errs, s)
			}
		}
		text = strings.Join(errs, "; ")
	}
	if text == "" {
		text = "the agent ended with " + subtype
		if terminal != "" {
			text += " (" + terminal + ")"
		}
	}
	if status, ok := o.Num("api_error_status"); ok {
		details["api_error_status"] = status
	}
	if v := o.Str("api_error"); v != "" {
		details["api_error"] = v
	}
	kind := "result_error"
	if terminal == "api_error" {
		kind = "api_error"
	}
	kit.Details(details).Merge(d.rejected, "status")
	return harness.Event{Type: harness.EventFailure, Kind: kind, Text: text, Details: details}
}

// rateLimitDetails reads a rate_limit_info object.
func rateLimitDetails(info obj) map[string]any {
	details := map[string]any{}
	if s := info.Str("status"); s != "" {
		details["status"] = s
	}
	if t := info.Str("rateLimitType"); t != "" {
		details["rate_limit_type"] = t
	}
	if at, ok := info.Num("resetsAt"); ok && at > 0 && at < 1<<40 {
		details["resets_at"] = time.Unix(at, 0).UTC().Format(time.RFC3339)
	}
	if info.Has("isUsingOverage") {
		details["is_using_overage"] = info.Flag("isUsingOverage")
	}
	return details
}

func (d *decoder) rateLimit(o obj) []harness.Event {
	info := o.Obj("rate_limit_info")
	if info == nil {
		return nil
	}
	details := rateLimitDetails(info)
	status, _ := details["status"].(string)
	text := "rate limit status: " + status
	if status == "" {
		text = "rate limit status unknown"
	}
	if t, ok := details["rate_limit_type"].(string); ok {
		text += " (" + t + ")"
	}
	if at, ok := details["resets_at"].(string); ok {
		text += ", resets at " + at
	}
	if status == "rejected" {
		d.rejected = details
	} else {
		d.rejected = nil
	}
	return []harness.Event{{Type: harness.EventNotice, Kind: "rate_limit", Text: text, Details: details}}
}

func (d *decoder) streamEvent(o obj) []harness.Event {
	ev := o.Obj("event")
	if ev == nil {
		return nil
	}
	msg := o.Str("api_message_id")
	switch ev.Str("type") {
	case "message_start":
		if m := ev.Obj("message"); m != nil && msg == "" {
			msg = m.Str("id")
		}
		return nil
	case "content_block_start":
		if i, ok := ev.Num("index"); ok && msg != "" && !d.stateless && (len(d.open) < maxBlocksTracked || d.has(msg)) {
			d.open[msg] = int(i)
		}
		return nil
	case "content_block_stop":
		if !d.stateless {
			delete(d.open, msg)
		}
		return nil
	case "content_block_delta":
		delta := ev.Obj("delta")
		if delta == nil {
			return nil
		}
		id := msg
		if i, ok := ev.Num("index"); ok && msg != "" && !d.stateless {
			id = msg + ":" + strconv.FormatInt(i, 10)
		}
		var details map[string]any
		if p := o.Str("parent_tool_use_id"); p != "" {
			details = map[string]any{"parent_tool_use_id": p}
		}
		switch delta.Str("type") {
		case "text_delta":
			return []harness.Event{{Type: harness.EventMessage, Delta: true, ID: id, Text: delta.Str("text"), Details: details}}
		case "thinking_delta":
			return []harness.Event{{Type: harness.EventReasoning, Delta: true, ID: id, Text: delta.Str("thinking"), Details: details}}
		}
	}
	return nil
}

func (d *decoder) has(msg string) bool {
	_, ok := d.open[msg]
	return ok
}
