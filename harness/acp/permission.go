package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
)

// Asking routes the agent's permission requests to the turn's caller
// (harness.Asker), for a turn whose permissions option is "ask".
func (l *client) Asking(ctx context.Context, a harness.Asking) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asking, l.askCtx = &a, ctx
}

// agentRequest answers a request of the agent: permissions by the turn's
// policy, or by its caller (permissions=ask); the file-system and
// terminal methods, which outpost does not advertise, and anything else
// are "method not found".
func (l *client) agentRequest(m envelope, w io.Writer) []harness.Event {
	if m.Method != sdk.ClientMethodSessionRequestPermission {
		_ = writeMsg(w, envelope{ID: m.ID, Error: sdk.NewMethodNotFound(m.Method)})
		return []harness.Event{{Type: harness.EventNotice, Kind: "unsupported",
			Text: fmt.Sprintf("%s: the agent called %s, which outpost does not offer", l.cfg.Name, clip(m.Method, 200))}}
	}
	var req sdk.RequestPermissionRequest
	if err := json.Unmarshal(m.Params, &req); err != nil {
		_ = writeMsg(w, envelope{ID: m.ID, Error: sdk.NewInvalidParams(map[string]any{"error": err.Error()})})
		return []harness.Event{{Type: harness.EventNotice, Kind: "protocol", Text: l.cfg.Name + ": an unreadable permission request was refused"}}
	}
	if l.s.ask && l.asking != nil && !l.cancelled {
		l.askCaller(m.ID, req)
		return nil
	}
	res, evs := l.decide(req, l.policyOption(req), "the turn's permissions")
	if l.s.ask && !l.cancelled {
		evs[0].Text += " (permissions=ask, and no one answers them)"
	}
	if err := writeMsg(w, envelope{ID: m.ID, Result: mustJSON(res)}); err != nil {
		return append(evs, harness.Event{Type: harness.EventNotice, Kind: "permission", Text: l.cfg.Name + ": the answer could not be sent: " + err.Error()})
	}
	return evs
}

// policyOption is the option the turn's policy picks: the first of the
// allowing (or refusing) kind, once rather than always; "" when none.
func (l *client) policyOption(req sdk.RequestPermissionRequest) string {
	want := []sdk.PermissionOptionKind{sdk.PermissionOptionKindRejectOnce, sdk.PermissionOptionKindRejectAlways}
	if !l.s.ask && l.s.allows(l.toolOf(req).kind) {
		want = []sdk.PermissionOptionKind{sdk.PermissionOptionKindAllowOnce, sdk.PermissionOptionKindAllowAlways}
	}
	for _, k := range want {
		for _, o := range req.Options {
			if o.Kind == k {
				return string(o.OptionId)
			}
		}
	}
	return ""
}

// toolOf is the tool call a request is about, as the agent described it
// so far and in the request.
func (l *client) toolOf(req sdk.RequestPermissionRequest) toolInfo {
	t := l.tools[string(req.ToolCall.ToolCallId)]
	if req.ToolCall.Kind != nil && *req.ToolCall.Kind != "" {
		t.kind = string(*req.ToolCall.Kind)
	}
	if t.kind == "" {
		t.kind = "other"
	}
	if req.ToolCall.Title != nil && *req.ToolCall.Title != "" {
		t.title = *req.ToolCall.Title
	}
	if req.ToolCall.RawInput != nil {
		t.input = req.ToolCall.RawInput
	}
	return t
}

// decide answers a request with option ("" or one the agent did not
// offer: cancelled), by who: the permission or permission_denied notice,
// and for a refusal the tool call ended as failed ("permission denied"),
// whatever the agent reports of it after.
func (l *client) decide(req sdk.RequestPermissionRequest, option, by string) (sdk.RequestPermissionResponse, []harness.Event) {
	id := string(req.ToolCall.ToolCallId)
	t := l.toolOf(req)
	var chosen *sdk.PermissionOption
	for i, o := range req.Options {
		if option != "" && string(o.OptionId) == option {
			chosen = &req.Options[i]
		}
	}
	allowed := chosen != nil && strings.HasPrefix(string(chosen.Kind), "allow")
	details := map[string]any{"tool": id, "tool_kind": t.kind, "title": t.title, "allowed": allowed, "by": by}
	res := sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	verb := "cancelled"
	if chosen != nil {
		res.Outcome = sdk.NewRequestPermissionOutcomeSelected(chosen.OptionId)
		details["option"] = string(chosen.OptionId)
		verb = "refused"
		if allowed {
			verb = "allowed"
		}
	}
	name := t.title
	if name == "" {
		name = "tool call " + id
	}
	ev := harness.Event{Type: harness.EventNotice, Kind: "permission", Text: fmt.Sprintf("%s: %s %s (%s) by %s", l.cfg.Name, verb, clip(name, 200), t.kind, by), Details: details}
	if allowed {
		return res, []harness.Event{ev}
	}
	ev.Kind = "permission_denied"
	evs := []harness.Event{ev}
	if id != "" {
		l.tools[id] = t
		failed := []sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("permission denied: " + verb + " by " + by))}
		evs = append(evs, l.toolUpdate(id, nil, nil, nil, string(sdk.ToolCallStatusFailed), failed, nil)...)
	}
	return res, evs
}

// askCaller asks the turn's caller on a goroutine of its own: the agent
// waits for the answer, the turn's other output goes on, and a cancel
// (Interrupt) or the turn's end answers cancelled. The caller holds l.mu.
func (l *client) askCaller(id json.RawMessage, req sdk.RequestPermissionRequest) {
	t := l.toolOf(req)
	p := harness.Permission{Tool: harness.Tool{ID: string(req.ToolCall.ToolCallId), Name: t.kind}, Title: t.title}
	if t.input != nil {
		p.Tool.Input, _ = json.Marshal(t.input)
	}
	for _, o := range req.Options {
		p.Options = append(p.Options, harness.PermissionOption{ID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	ctx, cancel := context.WithCancel(l.askCtx)
	key := string(id)
	l.asks[key] = cancel
	a := *l.asking
	a.Begin()
	go func() {
		defer a.End()
		option, err := a.Ask(ctx, p)
		if err != nil || ctx.Err() != nil {
			option = ""
		}
		cancel()
		l.mu.Lock()
		delete(l.asks, key)
		res, evs := l.decide(req, option, "the caller")
		l.mu.Unlock()
		if err := a.Write(func(w io.Writer) error { return writeMsg(w, envelope{ID: id, Result: mustJSON(res)}) }); err != nil {
			evs = append(evs, harness.Event{Type: harness.EventNotice, Kind: "permission", Text: l.cfg.Name + ": the answer could not be sent: " + err.Error()})
		}
		for _, ev := range evs {
			a.Emit(ev)
		}
	}()
}

// cancelAsks ends the caller's open questions: each answers cancelled.
// The caller holds l.mu.
func (l *client) cancelAsks() {
	for _, cancel := range l.asks {
		cancel()
	}
}
