package codex

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// History is the thread's exchange as its rollout records it: the
// response items of role user (less the context Codex injects, which
// begins with a tag such as <environment_context>) and assistant,
// reasoning summaries, and function calls with their outputs. Nil when the
// rollout is not among the files.
func History(t harness.Transcript) []harness.Event {
	data := rollout(t.Files, t.Native)
	if data == nil {
		return nil
	}
	var out []harness.Event
	for _, l := range bytes.Split(data, []byte("\n")) {
		var r struct {
			Type    string `json:"type"`
			Payload struct {
				Type      string `json:"type"`
				Role      string `json:"role"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
				CallID    string `json:"call_id"`
				Output    any    `json:"output"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
				Summary []struct {
					Text string `json:"text"`
				} `json:"summary"`
			} `json:"payload"`
		}
		if json.Unmarshal(l, &r) != nil || r.Type != "response_item" {
			continue
		}
		p := r.Payload
		switch p.Type {
		case "message":
			var b strings.Builder
			for _, c := range p.Content {
				b.WriteString(c.Text)
			}
			text := b.String()
			switch {
			case p.Role == "assistant" && text != "":
				out = append(out, harness.Event{Type: harness.EventMessage, Text: text})
			case p.Role == "user" && text != "" && !strings.HasPrefix(strings.TrimSpace(text), "<"):
				out = append(out, harness.Event{Type: harness.EventMessage, Kind: harness.KindUser, Text: text})
			}
		case "reasoning":
			for _, s := range p.Summary {
				out = append(out, harness.Event{Type: harness.EventReasoning, Text: s.Text})
			}
		case "function_call", "custom_tool_call":
			out = append(out, harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: p.CallID, Name: p.Name, Input: harness.SafeJSON(json.RawMessage(p.Arguments))}})
		case "function_call_output", "custom_tool_call_output":
			out = append(out, harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: p.CallID, Output: outputText(p.Output)}})
		}
	}
	return out
}

// outputText is a function call's output: a string, or an object whose
// "output" is one.
func outputText(v any) string {
	switch o := v.(type) {
	case string:
		return o
	case map[string]any:
		if s, ok := o["output"].(string); ok {
			return s
		}
	}
	return ""
}
