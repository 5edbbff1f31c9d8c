package acp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
)

// MaxChunk bounds the text of one message or thought chunk: a longer text
// goes as several chunks of the same message (the client appends them),
// so no notification outgrows a client's line limit.
const MaxChunk = 256 << 10

// updater turns one session's normalized events into session/update
// notifications, in order. The engine's event goroutine only queues them
// (event): a sender goroutine writes them, so an editor slow to read never
// slows the turn, nor makes it lose the agent's last lines to the
// engine's drain bound once the agent exited. finish waits until all were
// written.
type updater struct {
	a   *Agent
	sid sdk.SessionId

	mu       sync.Mutex
	streamed map[string]bool // message and reasoning ids sent as deltas
	text     bool            // some answer text was sent
	stop     string          // the finished event's stop reason
	queue    []sdk.SessionUpdate
	queued   int        // updates ever queued
	written  int        // updates ever written (or dropped with the client)
	progress *sync.Cond // on mu: written grew
	closed   bool
	wake     chan struct{}
	done     chan struct{}
	gone     bool // a write failed: the client is gone
}

// updater starts the sender of session id's updates; finish ends it.
func (a *Agent) updater(id string) *updater {
	u := &updater{a: a, sid: sdk.SessionId(id), streamed: map[string]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	u.progress = sync.NewCond(&u.mu)
	go u.sender()
	return u
}

// event queues what ev shows the editor.
func (u *updater) event(ev harness.Event) {
	u.mu.Lock()
	u.enqueue(u.updates(ev)...)
	u.mu.Unlock()
	u.signal()
}

// replay queues one event of a loaded conversation's history.
func (u *updater) replay(ev harness.Event) {
	if ev.Type == harness.EventMessage && ev.Kind == harness.KindUser {
		u.mu.Lock()
		for _, c := range chunks(ev.Text) {
			u.enqueue(sdk.UpdateUserMessageText(c))
		}
		u.mu.Unlock()
		u.signal()
		return
	}
	u.event(ev)
}

func (u *updater) push(up sdk.SessionUpdate) {
	u.mu.Lock()
	u.enqueue(up)
	u.mu.Unlock()
	u.signal()
}

// enqueue queues updates; the caller holds u.mu.
func (u *updater) enqueue(ups ...sdk.SessionUpdate) {
	u.queue = append(u.queue, ups...)
	u.queued += len(ups)
}

// flush waits until every update queued before it was written, so that a
// request sent next (a permission) comes after them.
func (u *updater) flush() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for target := u.queued; u.written < target && !u.closed; {
		u.progress.Wait()
	}
}

func (u *updater) signal() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// finish waits until every queued update was written (or the client is
// gone), and ends the sender.
func (u *updater) finish() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.signal()
	<-u.done
}

func (u *updater) sender() {
	defer close(u.done)
	for {
		u.mu.Lock()
		batch, closed := u.queue, u.closed
		u.queue = nil
		u.mu.Unlock()
		for _, up := range batch {
			u.send(up)
		}
		u.mu.Lock()
		u.written += len(batch)
		u.progress.Broadcast()
		u.mu.Unlock()
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-u.wake
	}
}

func (u *updater) send(up sdk.SessionUpdate) {
	if u.gone {
		return
	}
	// Not the prompt's context: a cancelled turn's last updates still go
	// out before its answer, as the protocol asks.
	if err := u.a.conn.SessionUpdate(context.Background(), sdk.SessionNotification{SessionId: u.sid, Update: up}); err != nil {
		u.gone = true
		u.a.log.Warn("outpost acp: session/update not sent; the turn goes on", "session", u.sid, "error", err, "cause", errClientGone)
	}
}

// updates maps one event: message text to agent_message_chunk, reasoning
// to agent_thought_chunk (a complete message whose deltas were sent is
// not sent again), a tool call to tool_call, its result to
// tool_call_update, a permission denial to a failed tool_call_update.
// Session, usage and notice events show nothing (usage is sent once the
// turn ended); the finished event's text only when no text was sent.
func (u *updater) updates(ev harness.Event) []sdk.SessionUpdate {
	switch ev.Type {
	case harness.EventMessage, harness.EventReasoning:
		if !u.fresh(ev) {
			return nil
		}
		mk := sdk.UpdateAgentMessageText
		if ev.Type == harness.EventReasoning {
			mk = sdk.UpdateAgentThoughtText
		} else {
			u.text = true
		}
		var out []sdk.SessionUpdate
		for _, c := range chunks(ev.Text) {
			out = append(out, mk(c))
		}
		return out
	case harness.EventToolCall:
		return toolCall(ev.Tool)
	case harness.EventToolResult:
		return toolResult(ev.Tool)
	case harness.EventFailure:
		if ev.Kind == "permission_denied" && ev.Tool != nil && ev.Tool.ID != "" {
			return []sdk.SessionUpdate{sdk.UpdateToolCall(sdk.ToolCallId(ev.Tool.ID), sdk.WithUpdateStatus(sdk.ToolCallStatusFailed),
				sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("permission denied: " + ev.Text))}))}
		}
	case harness.EventFinished:
		u.stop = ev.Stop
		if !u.text && ev.Text != "" {
			u.text = true
			return u.updates(harness.Event{Type: harness.EventMessage, Text: ev.Text})
		}
	}
	return nil
}

// fresh reports whether a message or reasoning event shows something new:
// a delta, or a complete one whose deltas were not streamed.
func (u *updater) fresh(ev harness.Event) bool {
	key := string(ev.Type) + "\x00" + ev.ID
	if ev.Delta {
		u.streamed[key] = true
		return ev.Text != ""
	}
	return ev.Text != "" && !(ev.ID != "" && u.streamed[key])
}

func toolCall(t *harness.Tool) []sdk.SessionUpdate {
	if t == nil || t.ID == "" {
		return nil
	}
	opts := []sdk.ToolCallStartOpt{sdk.WithStartKind(toolKind(t.Name)), sdk.WithStartStatus(sdk.ToolCallStatusInProgress)}
	var in any
	if len(t.Input) > 0 && json.Unmarshal(t.Input, &in) == nil {
		opts = append(opts, sdk.WithStartRawInput(in))
	}
	title := t.Name
	if title == "" {
		title = "tool"
	}
	out := []sdk.SessionUpdate{sdk.StartToolCall(sdk.ToolCallId(t.ID), title, opts...)}
	if p := plan(t.Name, t.Input); p != nil {
		out = append(out, *p)
	}
	return out
}

func toolResult(t *harness.Tool) []sdk.SessionUpdate {
	if t == nil || t.ID == "" {
		return nil
	}
	status := sdk.ToolCallStatusCompleted
	if t.Error {
		status = sdk.ToolCallStatusFailed
	}
	opts := []sdk.ToolCallUpdateOpt{sdk.WithUpdateStatus(status)}
	if t.Output != "" {
		var content []sdk.ToolCallContent
		for _, c := range chunks(t.Output) {
			content = append(content, sdk.ToolContent(sdk.TextBlock(c)))
		}
		opts = append(opts, sdk.WithUpdateContent(content))
	}
	return []sdk.SessionUpdate{sdk.UpdateToolCall(sdk.ToolCallId(t.ID), opts...)}
}

// toolKind is the ACP kind of a tool by the names the agents give them.
func toolKind(name string) sdk.ToolKind {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "todo"), strings.Contains(n, "plan"), strings.Contains(n, "think"):
		return sdk.ToolKindThink
	case strings.Contains(n, "bash"), strings.Contains(n, "shell"), strings.Contains(n, "exec"), strings.Contains(n, "command"), n == "run":
		return sdk.ToolKindExecute
	case strings.Contains(n, "fetch"), strings.Contains(n, "web"), strings.Contains(n, "http"):
		return sdk.ToolKindFetch
	case strings.Contains(n, "grep"), strings.Contains(n, "glob"), strings.Contains(n, "search"), strings.Contains(n, "find"), n == "ls" || strings.Contains(n, "list"):
		return sdk.ToolKindSearch
	case strings.Contains(n, "delete"), strings.Contains(n, "remove"):
		return sdk.ToolKindDelete
	case strings.Contains(n, "move"), strings.Contains(n, "rename"):
		return sdk.ToolKindMove
	case strings.Contains(n, "edit"), strings.Contains(n, "write"), strings.Contains(n, "patch"), strings.Contains(n, "create"):
		return sdk.ToolKindEdit
	case strings.Contains(n, "read"), strings.Contains(n, "view"), strings.Contains(n, "cat"):
		return sdk.ToolKindRead
	}
	return sdk.ToolKindOther
}

// plan is the plan update of a to-do tool call: Claude Code's TodoWrite
// ({"todos": [{"content", "status"}]}) and Codex's update_plan
// ({"plan": [{"step", "status"}]}); nil for any other call.
func plan(name string, input json.RawMessage) *sdk.SessionUpdate {
	if name != "TodoWrite" && name != "update_plan" {
		return nil
	}
	var in struct {
		Todos []struct{ Content, Status string } `json:"todos"`
		Plan  []struct{ Step, Status string }    `json:"plan"`
	}
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	var entries []sdk.PlanEntry
	add := func(text, status string) {
		st := sdk.PlanEntryStatusPending
		switch status {
		case "in_progress":
			st = sdk.PlanEntryStatusInProgress
		case "completed":
			st = sdk.PlanEntryStatusCompleted
		}
		entries = append(entries, sdk.PlanEntry{Content: text, Status: st, Priority: sdk.PlanEntryPriorityMedium})
	}
	for _, t := range in.Todos {
		add(t.Content, t.Status)
	}
	for _, t := range in.Plan {
		add(t.Step, t.Status)
	}
	if len(entries) == 0 {
		return nil
	}
	up := sdk.UpdatePlan(entries...)
	return &up
}

// usage sends the turn's usage_update: used is the tokens the turn's
// model calls read (input and cache), _meta.outpost the turn's and the
// conversation's usage as outpost counted them, and the budget. Outpost
// knows neither the model's context window (size is 0) nor prices (no
// cost).
func (u *updater) usage(ctx context.Context, a *Agent, res *engine.Result) {
	t := res.Usage
	meta := map[string]any{"usage": t}
	if res.Metered != nil {
		meta["metered"] = res.Metered
	}
	if m, err := a.o.Store.Meta(ctx, res.Conversation); err == nil && res.Conversation != "" {
		meta["conversation_usage"] = m.Usage
		if m.Metered != nil {
			meta["conversation_metered"] = m.Metered
		}
		if m.Budget > 0 {
			meta["budget"] = m.Budget
		}
	}
	u.push(sdk.SessionUpdate{UsageUpdate: &sdk.SessionUsageUpdate{
		Used: int(t.InputTokens + t.CacheReadTokens + t.CacheWriteTokens),
		Meta: map[string]any{MetaKey: meta},
	}})
}

// chunks splits text into pieces of at most MaxChunk bytes, on rune
// boundaries.
func chunks(text string) []string {
	var out []string
	for len(text) > MaxChunk {
		n := MaxChunk
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}
