package claude

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// History is the session's exchange as its transcript records it: the
// user's prompts, the answers' text, thinking, tool uses and the tool
// results that come back as user lines. Sidechains (sub-agents) and meta
// lines are left out. Nil when the transcript holds no session file of
// t.Native.
func History(t harness.Transcript) []harness.Event {
	var out []harness.Event
	found := false
	for _, p := range slices.Sorted(maps.Keys(t.Files)) {
		rel, ok := strings.CutPrefix(p, ProjectsDir+"/")
		if !ok || !strings.HasSuffix(rel, "/"+t.Native+".jsonl") || !Match(rel, t.Native) {
			continue
		}
		found = true
		for _, l := range strings.Split(string(t.Files[p]), "\n") {
			out = append(out, historyLine([]byte(l))...)
		}
	}
	if !found {
		return nil
	}
	return out
}

// historyLine is one transcript line's events.
func historyLine(l []byte) []harness.Event {
	var r struct {
		Type        string `json:"type"`
		IsMeta      bool   `json:"isMeta"`
		IsSidechain bool   `json:"isSidechain"`
		Message     struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(l, &r) != nil || r.IsMeta || r.IsSidechain || (r.Type != "user" && r.Type != "assistant") {
		return nil
	}
	var text string
	if json.Unmarshal(r.Message.Content, &text) == nil {
		if r.Type == "user" {
			return []harness.Event{{Type: harness.EventMessage, Kind: harness.KindUser, Text: text}}
		}
		return []harness.Event{{Type: harness.EventMessage, Text: text}}
	}
	var blocks []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	if json.Unmarshal(r.Message.Content, &blocks) != nil {
		return nil
	}
	var out []harness.Event
	for _, b := range blocks {
		switch {
		case b.Type == "text" && r.Type == "user":
			out = append(out, harness.Event{Type: harness.EventMessage, Kind: harness.KindUser, Text: b.Text})
		case b.Type == "text":
			out = append(out, harness.Event{Type: harness.EventMessage, Text: b.Text})
		case b.Type == "thinking" && b.Thinking != "":
			out = append(out, harness.Event{Type: harness.EventReasoning, Text: b.Thinking})
		case b.Type == "tool_use":
			out = append(out, harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: b.ID, Name: b.Name, Input: harness.SafeJSON(b.Input)}})
		case b.Type == "tool_result":
			out = append(out, harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: b.ToolUseID, Output: resultText(b.Content), Error: b.IsError}})
		}
	}
	return out
}

// resultText is a tool result's content: a string, or text blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, x := range blocks {
		b.WriteString(x.Text)
	}
	return b.String()
}
