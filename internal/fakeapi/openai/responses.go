package openai

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// parseResponsesInput fills the request summary from a Responses API body.
func parseResponsesInput(req *Request, body map[string]any) {
	switch in := body["input"].(type) {
	case string:
		req.NumInput = 1
		req.LastItemType = "message"
		req.LastUserText = in
		req.UserTexts = []string{in}
	case []any:
		parseItems(req, in, func(m map[string]any) (string, itemKind, any) {
			typ, _ := m["type"].(string)
			if typ == "" {
				if _, ok := m["role"]; ok {
					typ = "message"
				}
			}
			switch typ {
			case "message":
				if role, _ := m["role"].(string); role == "user" {
					return typ, userItem, m["content"]
				}
			case "function_call_output", "custom_tool_call_output":
				return typ, toolOutputItem, m["output"]
			}
			return typ, otherItem, nil
		})
	}
	if t, ok := body["text"].(map[string]any); ok {
		parseOutputFormat(req, t["format"])
	}
	parseToolNames(req, body["tools"], false)
}

// responsesTool picks the tool name and arguments for a shell tool call.
func responsesTool(req *Request, sc Scenario) (name, args string) {
	return shellTool(req, sc, []string{"exec_command", "shell_command", "shell"}, func(name, command string) any {
		switch name {
		case "shell":
			return map[string]any{"command": []string{"bash", "-lc", command}}
		case "shell_command", "bash":
			return map[string]any{"command": command}
		}
		return map[string]any{"cmd": command}
	})
}

func responsesUsage(u Usage) map[string]any {
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CachedTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens":          u.TotalTokens(),
	}
}

// rstream writes one Responses API event stream.
type rstream struct {
	s     *Server
	r     *http.Request
	e     *sse
	seq   int
	resp  map[string]any
	items []any
}

func (st *rstream) ev(typ string, fields map[string]any) bool {
	fields["type"] = typ
	fields["sequence_number"] = st.seq
	st.seq++
	st.e.event(typ, fields)
	return st.e.ok()
}

func (st *rstream) response(status string) map[string]any {
	m := make(map[string]any, len(st.resp)+2)
	for k, v := range st.resp {
		m[k] = v
	}
	m["status"] = status
	if st.items == nil {
		m["output"] = []any{}
	} else {
		m["output"] = st.items
	}
	return m
}

// message streams an assistant message with the given deltas, pausing delay before
// each; it returns false if the stream was cut.
func (st *rstream) message(deltas []string, delay time.Duration) bool {
	idx := len(st.items)
	id := st.s.newID("msg")
	if !st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{
		"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{},
	}}) {
		return false
	}
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	if !st.ev("response.content_part.added", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": part}) {
		return false
	}
	var full strings.Builder
	for _, d := range deltas {
		if !st.s.sleep(st.r, delay) {
			return false
		}
		full.WriteString(d)
		if !st.ev("response.output_text.delta", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "delta": d, "logprobs": []any{}}) {
			return false
		}
	}
	text := full.String()
	done := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	item := map[string]any{"id": id, "type": "message", "status": "completed", "role": "assistant", "content": []any{done}}
	st.items = append(st.items, item)
	return st.ev("response.output_text.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}}) &&
		st.ev("response.content_part.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": done}) &&
		st.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// partialMessage starts an assistant message and streams one delta without finishing it.
func (st *rstream) partialMessage(delta string) bool {
	idx := len(st.items)
	id := st.s.newID("msg")
	return st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{
		"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{},
	}}) &&
		st.ev("response.content_part.added", map[string]any{"item_id": id, "output_index": idx, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}) &&
		st.ev("response.output_text.delta", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "delta": delta, "logprobs": []any{}})
}

func (st *rstream) reasoning(summary string) bool {
	idx := len(st.items)
	id := st.s.newID("rs")
	if !st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{
		"id": id, "type": "reasoning", "summary": []any{},
	}}) {
		return false
	}
	if !st.ev("response.reasoning_summary_part.added", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0,
		"part": map[string]any{"type": "summary_text", "text": ""}}) {
		return false
	}
	for _, d := range chunkText(summary) {
		if !st.ev("response.reasoning_summary_text.delta", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "delta": d}) {
			return false
		}
	}
	part := map[string]any{"type": "summary_text", "text": summary}
	item := map[string]any{"id": id, "type": "reasoning", "summary": []any{part}}
	st.items = append(st.items, item)
	return st.ev("response.reasoning_summary_text.done", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "text": summary}) &&
		st.ev("response.reasoning_summary_part.done", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "part": part}) &&
		st.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// callKind is what tells the Responses API's two kinds of tool call apart
// on the stream: a function call streams its JSON arguments, a custom tool
// call (apply_patch) its free-form input. Their events are otherwise the
// same, so one toolCall writes both.
type callKind struct {
	idPrefix string // of the item's id
	typ      string // the item's type
	field    string // the item's member that holds the streamed value
	events   string // the prefix of the delta and done events
}

var (
	functionCall   = callKind{"fc", "function_call", "arguments", "response.function_call_arguments"}
	customToolCall = callKind{"ctc", "custom_tool_call", "input", "response.custom_tool_call_input"}
)

// toolCall streams a tool call of kind k: the item added in progress, its
// value in one delta, then done.
func (st *rstream) toolCall(k callKind, name, value string) bool {
	idx := len(st.items)
	id := st.s.newID(k.idPrefix)
	callID := st.s.newID("call")
	item := func(status, v string) map[string]any {
		return map[string]any{"id": id, "type": k.typ, "status": status, "name": name, "call_id": callID, k.field: v}
	}
	if !st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": item("in_progress", "")}) {
		return false
	}
	if !st.ev(k.events+".delta", map[string]any{"item_id": id, "output_index": idx, "delta": value}) {
		return false
	}
	done := item("completed", value)
	st.items = append(st.items, done)
	return st.ev(k.events+".done", map[string]any{"item_id": id, "output_index": idx, k.field: value}) &&
		st.ev("response.output_item.done", map[string]any{"output_index": idx, "item": done})
}

func (st *rstream) completed(u Usage) bool {
	resp := st.response("completed")
	resp["usage"] = responsesUsage(u)
	return st.ev("response.completed", map[string]any{"response": resp})
}

// serveResponses answers POST /v1/responses; finished reports whether
// the whole reply was written (an error answer included).
func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request, req *Request, sc Scenario) (finished bool) {
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	st := &rstream{s: s, r: r, resp: map[string]any{
		"id": s.newID("resp"), "object": "response", "created_at": time.Now().Unix(), "model": model,
	}}
	if req.Body != nil && !req.Stream {
		s.responsesJSON(w, req, sc, st)
		return true
	}
	st.e = newSSE(w)
	if !st.ev("response.created", map[string]any{"response": st.response("in_progress")}) ||
		!st.ev("response.in_progress", map[string]any{"response": st.response("in_progress")}) {
		return
	}
	u := *sc.Usage
	switch sc.Kind {
	case KindText:
		finished = st.message(chunkText(sc.Text), 0) && st.completed(u)
	case KindEcho:
		finished = st.message(chunkText(EchoText(req)), 0) && st.completed(u)
	case KindReasoning:
		finished = st.reasoning(sc.Reasoning) && st.message(chunkText(sc.Text), 0) && st.completed(u)
	case KindToolCall:
		name, args := responsesTool(req, sc)
		finished = st.toolCall(functionCall, name, args) && st.completed(u)
	case KindApplyPatch:
		name := sc.ToolName
		if name == "" {
			name = "apply_patch"
		}
		finished = st.toolCall(customToolCall, name, sc.Patch) && st.completed(u)
	case KindSlow:
		finished = st.message(slowDeltas(sc), sc.Delay) && st.completed(u)
	case KindDrop:
		// A message that starts and streams one delta, then the connection is cut
		// (no output_item.done, no response.completed, no chunked-encoding terminator).
		st.partialMessage(chunkText(sc.Text)[0])
		panic(http.ErrAbortHandler)
	case KindTruncate:
		st.partialMessage(chunkText(sc.Text)[0])
	case KindStall:
		s.hang(r)
	case KindFailed:
		code, msg := sc.ErrorCode, sc.ErrorMessage
		if code == "" {
			code = "server_error"
		}
		if msg == "" {
			msg = "fake failure"
		}
		resp := st.response("failed")
		resp["error"] = map[string]any{"code": code, "message": msg}
		resp["usage"] = nil
		finished = st.ev("response.failed", map[string]any{"response": resp})
	default:
		finished = st.message(chunkText(sc.Text), 0) && st.completed(u)
	}
	return finished
}

// slowDeltas are the deltas of a slow stream: "chunk 1 ", "chunk 2 ", … (Chunks of them).
func slowDeltas(sc Scenario) []string {
	var out []string
	for i := 0; i < sc.Chunks; i++ {
		out = append(out, "chunk "+strconv.Itoa(i+1)+" ")
	}
	return out
}

// responsesJSON answers a non-streaming Responses request with the whole response object.
func (s *Server) responsesJSON(w http.ResponseWriter, req *Request, sc Scenario, st *rstream) {
	add := func(item map[string]any) { st.items = append(st.items, item) }
	msg := func(text string) {
		add(map[string]any{"id": s.newID("msg"), "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	switch sc.Kind {
	case KindReasoning:
		add(map[string]any{"id": s.newID("rs"), "type": "reasoning", "summary": []any{map[string]any{"type": "summary_text", "text": sc.Reasoning}}})
		msg(sc.Text)
	case KindEcho:
		msg(EchoText(req))
	case KindToolCall:
		name, args := responsesTool(req, sc)
		add(map[string]any{"id": s.newID("fc"), "type": "function_call", "status": "completed", "name": name, "call_id": s.newID("call"), "arguments": args})
	case KindApplyPatch:
		add(map[string]any{"id": s.newID("ctc"), "type": "custom_tool_call", "status": "completed", "name": "apply_patch", "call_id": s.newID("call"), "input": sc.Patch})
	case KindSlow:
		msg(strings.Join(slowDeltas(sc), ""))
	case KindFailed, KindDrop, KindStall, KindTruncate:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"message": "fake failure", "type": "server_error", "code": "server_error"}})
		return
	default:
		msg(sc.Text)
	}
	resp := st.response("completed")
	resp["usage"] = responsesUsage(*sc.Usage)
	writeJSON(w, http.StatusOK, resp)
}
