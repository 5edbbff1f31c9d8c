package openai

import (
	"encoding/json"
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
		req.NumInput = len(in)
		for _, it := range in {
			m, _ := it.(map[string]any)
			if m == nil {
				continue
			}
			typ, _ := m["type"].(string)
			if typ == "" {
				if _, ok := m["role"]; ok {
					typ = "message"
				}
			}
			req.LastItemType = typ
			req.ToolOutput = ""
			switch typ {
			case "message":
				if role, _ := m["role"].(string); role == "user" {
					t := contentText(m["content"])
					req.UserTexts = append(req.UserTexts, t)
					req.LastUserText = t
				}
			case "function_call_output", "custom_tool_call_output":
				req.ToolOutput = contentText(m["output"])
			}
		}
	}
	if t, ok := body["text"].(map[string]any); ok {
		if f, ok := t["format"].(map[string]any); ok {
			if typ, _ := f["type"].(string); typ != "" && typ != "text" {
				req.OutputFormat = f
			}
		}
	}
	if tools, ok := body["tools"].([]any); ok {
		for _, t := range tools {
			m, _ := t.(map[string]any)
			if m == nil {
				continue
			}
			name, _ := m["name"].(string)
			if name == "" {
				if f, ok := m["function"].(map[string]any); ok {
					name, _ = f["name"].(string)
				}
			}
			if name == "" {
				name, _ = m["type"].(string)
			}
			req.ToolNames = append(req.ToolNames, name)
		}
	}
}

// contentText joins the text of a string or of an array of content parts
// ({type: input_text|output_text|text, text}).
func contentText(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			switch pm := p.(type) {
			case string:
				parts = append(parts, pm)
			case map[string]any:
				if t, ok := pm["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	case map[string]any:
		if t, ok := c["text"].(string); ok {
			return t
		}
		if t, ok := c["content"].(string); ok {
			return t
		}
	}
	return ""
}

// responsesTool picks the tool name and arguments for a shell tool call.
func responsesTool(req *Request, sc Scenario) (name, args string) {
	if sc.ToolName != "" {
		name = sc.ToolName
	}
	if sc.Arguments != "" {
		args = sc.Arguments
	}
	if name == "" {
		switch {
		case req.HasTool("exec_command"):
			name = "exec_command"
		case req.HasTool("shell_command"):
			name = "shell_command"
		case req.HasTool("shell"):
			name = "shell"
		default:
			name = "exec_command"
		}
	}
	if args == "" {
		var v any
		switch name {
		case "shell":
			v = map[string]any{"command": []string{"bash", "-lc", sc.Command}}
		case "shell_command", "bash":
			v = map[string]any{"command": sc.Command}
		default:
			v = map[string]any{"cmd": sc.Command}
		}
		b, _ := json.Marshal(v)
		args = string(b)
	}
	return name, args
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

func (st *rstream) functionCall(name, args string) bool {
	idx := len(st.items)
	id := st.s.newID("fc")
	callID := st.s.newID("call")
	if !st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{
		"id": id, "type": "function_call", "status": "in_progress", "name": name, "call_id": callID, "arguments": "",
	}}) {
		return false
	}
	if !st.ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": args}) {
		return false
	}
	item := map[string]any{"id": id, "type": "function_call", "status": "completed", "name": name, "call_id": callID, "arguments": args}
	st.items = append(st.items, item)
	return st.ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "arguments": args}) &&
		st.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

func (st *rstream) customToolCall(name, input string) bool {
	idx := len(st.items)
	id := st.s.newID("ctc")
	callID := st.s.newID("call")
	if !st.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{
		"id": id, "type": "custom_tool_call", "status": "in_progress", "call_id": callID, "name": name, "input": "",
	}}) {
		return false
	}
	if !st.ev("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": idx, "delta": input}) {
		return false
	}
	item := map[string]any{"id": id, "type": "custom_tool_call", "status": "completed", "call_id": callID, "name": name, "input": input}
	st.items = append(st.items, item)
	return st.ev("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": idx, "input": input}) &&
		st.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item})
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
		finished = st.functionCall(name, args) && st.completed(u)
	case KindApplyPatch:
		name := sc.ToolName
		if name == "" {
			name = "apply_patch"
		}
		finished = st.customToolCall(name, sc.Patch) && st.completed(u)
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
		select {
		case <-r.Context().Done():
		case <-s.life.Done():
		}
		panic(http.ErrAbortHandler)
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
