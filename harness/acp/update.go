package acp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
)

// maxToolOutput bounds a tool result's text in its event.
const maxToolOutput = 64 << 10

// update maps one session/update notification onto events. Updates of
// another session, and the history a session/load replays, give none.
func (l *client) update(params json.RawMessage) []harness.Event {
	var n struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	if json.Unmarshal(params, &n) != nil || n.SessionID != l.session && !(l.session == "" && n.SessionID == l.in.Conversation) {
		return nil
	}
	var kind struct {
		SessionUpdate string `json:"sessionUpdate"`
	}
	if json.Unmarshal(n.Update, &kind) != nil {
		return nil
	}
	if l.loading || kind.SessionUpdate == "user_message_chunk" {
		// History (session/load replays it) and the user's own text.
		return nil
	}
	var u sdk.SessionUpdate
	if err := json.Unmarshal(n.Update, &u); err != nil {
		// A kind this SDK does not know, or a malformed one: nothing a
		// turn reports.
		return nil
	}
	switch {
	case u.AgentMessageChunk != nil:
		l.metaUsage(u.AgentMessageChunk.Meta)
		if evs, ok := l.agentText(u.AgentMessageChunk.Content); ok {
			return evs
		}
		return l.chunk(harness.EventMessage, u.AgentMessageChunk.Content, u.AgentMessageChunk.MessageId)
	case u.AgentThoughtChunk != nil:
		return l.chunk(harness.EventReasoning, u.AgentThoughtChunk.Content, u.AgentThoughtChunk.MessageId)
	case u.ToolCall != nil:
		t := u.ToolCall
		return l.toolCall(string(t.ToolCallId), string(t.Kind), t.Title, t.RawInput, string(t.Status), t.Content, t.RawOutput)
	case u.ToolCallUpdate != nil:
		t := u.ToolCallUpdate
		var status string
		if t.Status != nil {
			status = string(*t.Status)
		}
		return l.toolUpdate(string(t.ToolCallId), (*string)(t.Kind), t.Title, t.RawInput, status, t.Content, t.RawOutput)
	case u.Plan != nil:
		return []harness.Event{planNotice(u.Plan.Entries)}
	case u.UsageUpdate != nil:
		d := map[string]any{"used": u.UsageUpdate.Used, "size": u.UsageUpdate.Size}
		if c := u.UsageUpdate.Cost; c != nil {
			d["cost"] = map[string]any{"amount": c.Amount, "currency": c.Currency}
		}
		return []harness.Event{{Type: harness.EventNotice, Kind: "context", Text: fmt.Sprintf("context window: %d of %d tokens", u.UsageUpdate.Used, u.UsageUpdate.Size), Details: d}}
	}
	// available_commands_update, current_mode_update,
	// config_option_update, session_info_update: nothing a turn reports.
	return nil
}

// agentText is the event of a message chunk that the preset's AgentText
// says is the agent's own report, not the model's text.
func (l *client) agentText(c sdk.ContentBlock) ([]harness.Event, bool) {
	if l.cfg.AgentText == nil || c.Text == nil {
		return nil, false
	}
	ev, ok := l.cfg.AgentText(c.Text.Text)
	if !ok {
		return nil, false
	}
	if ev.Type == harness.EventFailure {
		if l.agentErr {
			return nil, true // one failure a prompt: the first is the cause
		}
		l.agentErr = true
		ev.Kind = harness.KindTurnFailed
		l.queued = nil
	}
	return []harness.Event{ev}, true
}

// chunk is a message or reasoning delta; the id groups the deltas of one
// block (the agent's messageId, else one per run of chunks of a type).
func (l *client) chunk(typ harness.EventType, c sdk.ContentBlock, messageID *string) []harness.Event {
	text := blockText(c)
	if text == "" {
		return nil
	}
	key := string(typ)
	if messageID != nil && *messageID != "" {
		key += ":" + *messageID
	}
	if key != l.last {
		l.last = key
		l.msgs++
	}
	if typ == harness.EventMessage {
		l.text.WriteString(text)
	}
	return []harness.Event{{Type: typ, Text: text, Delta: true, ID: fmt.Sprintf("p%d:%d", l.turn, l.msgs)}}
}

// blockText is the text of a content block: its text, or a resource's
// name.
func blockText(c sdk.ContentBlock) string {
	switch {
	case c.Text != nil:
		return c.Text.Text
	case c.ResourceLink != nil:
		return c.ResourceLink.Uri
	case c.Resource != nil && c.Resource.Resource.TextResourceContents != nil:
		return c.Resource.Resource.TextResourceContents.Text
	}
	return ""
}

// toolCall records a tool call; toolUpdate reports it once it runs.
func (l *client) toolCall(id, kind, title string, rawInput any, status string, content []sdk.ToolCallContent, rawOutput any) []harness.Event {
	if id == "" {
		return nil
	}
	if kind == "" {
		kind = "other"
	}
	l.tools[id] = toolInfo{kind: kind, title: title, input: rawInput}
	return l.toolUpdate(id, nil, nil, rawInput, status, content, rawOutput)
}

// toolUpdate reports a tool call when it starts running (status
// in_progress, or already over): the call as the agent then describes it
// (its rawInput, which agents often complete only then), and its result
// once the status is terminal. A call still pending (waiting for
// permission) gives nothing yet.
func (l *client) toolUpdate(id string, kind, title *string, rawInput any, status string, content []sdk.ToolCallContent, rawOutput any) []harness.Event {
	t, ok := l.tools[id]
	if !ok {
		if id == "" {
			return nil
		}
		t = toolInfo{kind: "other"}
	}
	if kind != nil && *kind != "" {
		t.kind = *kind
	}
	if title != nil && *title != "" {
		t.title = *title
	}
	if rawInput != nil {
		t.input = rawInput
	}
	var evs []harness.Event
	running := status == string(sdk.ToolCallStatusInProgress)
	over := status == string(sdk.ToolCallStatusCompleted) || status == string(sdk.ToolCallStatusFailed)
	if !t.called && (running || over) {
		t.called = true
		l.text.Reset() // the answer is the text after the last tool call
		l.last = ""
		in := t.input
		if m, ok := in.(map[string]any); in == nil || ok && len(m) == 0 {
			in = map[string]any{"title": t.title}
		}
		b, _ := json.Marshal(in)
		evs = append(evs, harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: t.kind, Input: b}, Details: map[string]any{"title": t.title}})
	}
	if over && !t.done {
		t.done = true
		out := toolText(content)
		if out == "" && rawOutput != nil {
			b, _ := json.Marshal(rawOutput)
			out = string(b)
		}
		evs = append(evs, harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: id, Name: t.kind, Output: clip(out, maxToolOutput), Error: status == string(sdk.ToolCallStatusFailed)}})
	}
	l.tools[id] = t
	return evs
}

func toolText(content []sdk.ToolCallContent) string {
	var b strings.Builder
	for _, c := range content {
		switch {
		case c.Content != nil:
			b.WriteString(blockText(c.Content.Content))
		case c.Diff != nil:
			b.WriteString("diff " + c.Diff.Path)
		case c.Terminal != nil:
			b.WriteString("terminal " + c.Terminal.TerminalId)
		}
		if b.Len() > maxToolOutput {
			break
		}
	}
	return b.String()
}

func planNotice(entries []sdk.PlanEntry) harness.Event {
	var b strings.Builder
	list := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "[%s] %s\n", e.Status, e.Content)
		list = append(list, map[string]any{"content": e.Content, "status": string(e.Status), "priority": string(e.Priority)})
	}
	return harness.Event{Type: harness.EventNotice, Kind: "plan", Text: strings.TrimSpace(b.String()), Details: map[string]any{"entries": list}}
}

// promptUsage is a prompt's token usage: the protocol's usage, the sum
// of the model calls' _meta.usage (metaUsage), or Gemini CLI's
// _meta.quota.token_count, which has no cache or thought counts
// (incomplete).
func (l *client) promptUsage(r sdk.PromptResponse, raw json.RawMessage) (harness.Usage, bool) {
	if u := r.Usage; u != nil {
		return protocolUsage(u), true
	}
	if l.callUsage != nil {
		return *l.callUsage, true
	}
	var m struct {
		Meta struct {
			Quota struct {
				TokenCount *struct {
					Input  int64 `json:"input_tokens"`
					Output int64 `json:"output_tokens"`
				} `json:"token_count"`
			} `json:"quota"`
		} `json:"_meta"`
	}
	if json.Unmarshal(raw, &m) == nil && m.Meta.Quota.TokenCount != nil {
		tc := m.Meta.Quota.TokenCount
		return harness.Usage{InputTokens: tc.Input, OutputTokens: tc.Output}, true
	}
	return harness.Usage{}, false
}

// NewDecoder decodes a recorded ACP exchange (the agent's side, one
// message a line) without a turn: what a live turn would report, with no
// replies written.
func NewDecoder() func(line []byte) []harness.Event {
	l := &client{cfg: Config{Name: "acp"}, pending: map[int64]string{}, tools: map[string]toolInfo{}}
	return func(line []byte) []harness.Event {
		var m struct {
			Params struct {
				SessionID string `json:"sessionId"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) == nil && l.session == "" && m.Params.SessionID != "" {
			l.session = m.Params.SessionID
		}
		return l.Decode(line, discard{})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// protocolUsage converts ACP's usage. The protocol does not say whether
// inputTokens holds the cache reads and outputTokens the thoughts;
// totalTokens ("the sum of all token types") tells: when it is the sum of
// every counter (OpenCode 1.18.33, measured), they are apart and are
// added here as outpost counts them (output includes reasoning); when it
// is input + output (+ thoughts), the input includes the cache reads,
// which are subtracted. Without a cache-read count the usage is
// incomplete.
func protocolUsage(u *sdk.Usage) harness.Usage {
	val := func(p *int) int64 {
		if p == nil {
			return 0
		}
		return int64(*p)
	}
	in, out, total := int64(u.InputTokens), int64(u.OutputTokens), int64(u.TotalTokens)
	cr, cw, th := val(u.CachedReadTokens), val(u.CachedWriteTokens), val(u.ThoughtTokens)
	res := harness.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw, Complete: u.CachedReadTokens != nil}
	switch total {
	case in + out + th + cr + cw:
		res.OutputTokens += th
	case in + out + th:
		res.OutputTokens += th
		res.InputTokens = max(0, in-cr-cw)
	case in + out:
		res.InputTokens = max(0, in-cr-cw)
	default:
		res.OutputTokens += th
		res.Complete = false // the counters do not add up: say so
	}
	return res
}

// metaUsage adds a model call's usage that an agent puts in a chunk's
// _meta.usage (Qwen Code 0.24.4: an empty agent_message_chunk after each
// model call, in ACP's usage shape), for a prompt whose response has
// none.
func (l *client) metaUsage(meta map[string]any) {
	raw, ok := meta["usage"]
	if !ok {
		return
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return
	}
	var u sdk.Usage
	if json.Unmarshal(b, &u) != nil || u.TotalTokens == 0 {
		return
	}
	got := protocolUsage(&u)
	if l.callUsage != nil {
		got = l.callUsage.Add(got)
	}
	l.callUsage = &got
}
