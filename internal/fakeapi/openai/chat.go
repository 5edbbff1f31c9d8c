package openai

import (
	"net/http"
	"strings"
	"time"
)

// parseChatInput fills the request summary from a Chat Completions body.
func parseChatInput(req *Request, body map[string]any) {
	if msgs, ok := body["messages"].([]any); ok {
		parseItems(req, msgs, func(m map[string]any) (string, itemKind, any) {
			role, _ := m["role"].(string)
			switch role {
			case "user":
				return role, userItem, m["content"]
			case "tool", "function":
				return role, toolOutputItem, m["content"]
			}
			return role, otherItem, nil
		})
	}
	parseOutputFormat(req, body["response_format"])
	parseToolNames(req, body["tools"], true)
}

// chatTool picks the tool name and arguments for a shell tool call on Chat Completions:
// bash {"command","description"} (Copilot) unless the scenario says otherwise.
func chatTool(req *Request, sc Scenario) (name, args string) {
	return shellTool(req, sc, []string{"bash", "shell", "exec_command", "run_shell_command"}, func(name, command string) any {
		switch name {
		case "exec_command":
			return map[string]any{"cmd": command}
		case "shell":
			return map[string]any{"command": []string{"bash", "-lc", command}}
		}
		return map[string]any{"command": command, "description": "Run a shell command"}
	})
}

func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens":             u.InputTokens,
		"completion_tokens":         u.OutputTokens,
		"total_tokens":              u.TotalTokens(),
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedTokens},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
	}
}

// serveChat answers POST /v1/chat/completions; finished reports whether
// the whole reply was written (an error answer included).
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, req *Request, sc Scenario) (finished bool) {
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	id := s.newID("chatcmpl")
	created := time.Now().Unix()
	u := *sc.Usage

	// What the reply is made of.
	var text string
	var deltas []string
	var delay time.Duration
	var toolName, toolArgs string
	switch sc.Kind {
	case KindEcho:
		text = EchoText(req)
	case KindToolCall:
		toolName, toolArgs = chatTool(req, sc)
	case KindSlow:
		deltas, delay = slowDeltas(sc), sc.Delay
		text = strings.Join(deltas, "")
	default: // text, reasoning, apply_patch and the stream failures
		text = sc.Text
	}
	if deltas == nil {
		deltas = chunkText(text)
	}

	if req.Body != nil && !req.Stream {
		msg := map[string]any{"role": "assistant", "content": text, "refusal": nil}
		finish := "stop"
		if toolName != "" {
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": s.newID("call"), "type": "function",
				"function": map[string]any{"name": toolName, "arguments": toolArgs}}}
			finish = "tool_calls"
		}
		if sc.Kind == KindFailed || sc.Kind == KindDrop || sc.Kind == KindStall || sc.Kind == KindTruncate {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"message": "fake failure", "type": "server_error", "code": "server_error"}})
			return true
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":   chatUsage(u), "system_fingerprint": "fp_fake",
		})
		return true
	}

	includeUsage := false
	if so, ok := req.Body["stream_options"].(map[string]any); ok {
		includeUsage, _ = so["include_usage"].(bool)
	}
	e := newSSE(w)
	chunk := func(delta map[string]any, finish any) bool {
		e.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": "fp_fake",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		})
		return e.ok()
	}
	if !chunk(map[string]any{"role": "assistant", "content": ""}, nil) {
		return
	}
	switch sc.Kind {
	case KindStall:
		s.hang(r)
	case KindDrop:
		chunk(map[string]any{"content": deltas[0]}, nil)
		panic(http.ErrAbortHandler)
	case KindTruncate:
		chunk(map[string]any{"content": deltas[0]}, nil)
		return
	case KindFailed:
		msg := sc.ErrorMessage
		if msg == "" {
			msg = "fake failure"
		}
		code := sc.ErrorCode
		if code == "" {
			code = "server_error"
		}
		e.event("", map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": code}})
		return e.ok()
	}
	finish := "stop"
	if toolName != "" {
		finish = "tool_calls"
		callID := s.newID("call")
		if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": callID, "type": "function",
			"function": map[string]any{"name": toolName, "arguments": ""}}}}, nil) {
			return
		}
		if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0,
			"function": map[string]any{"arguments": toolArgs}}}}, nil) {
			return
		}
	} else {
		for _, d := range deltas {
			if !s.sleep(r, delay) {
				return
			}
			if !chunk(map[string]any{"content": d}, nil) {
				return
			}
		}
	}
	if !chunk(map[string]any{}, finish) {
		return
	}
	if includeUsage {
		e.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": "fp_fake",
			"choices": []any{}, "usage": chatUsage(u),
		})
	}
	e.event("", "[DONE]")
	return e.ok()
}
