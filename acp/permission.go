package acp

import (
	"context"
	"encoding/json"
	"maps"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
	hacp "github.com/outposthq/outpost/harness/acp"
)

// turnOptions are the options of a session's turn: an agent that speaks
// ACP in the sandbox (harness.Harness.LiveOnly: the ACP presets) asks
// the editor for its permissions unless the session says otherwise
// (permissions=ask, docs/acp.md).
func (s *session) turnOptions() map[string]string {
	if !s.h.LiveOnly {
		return s.cfg.Options
	}
	if _, ok := s.cfg.Options[hacp.OptionPermissions]; ok {
		return s.cfg.Options
	}
	o := maps.Clone(s.cfg.Options)
	if o == nil {
		o = map[string]string{}
	}
	o[hacp.OptionPermissions] = "ask"
	return o
}

// ask puts the agent's permission request to the editor as
// session/request_permission, after the updates queued before it (the
// tool call it is about), and returns the option the editor chose; ""
// when it cancelled the request, or the turn was cancelled meanwhile.
func (a *Agent) ask(sid string, u *updater) harness.AskFunc {
	return func(ctx context.Context, p harness.Permission) (string, error) {
		u.flush()
		kind, status := toolKind(p.Tool.Name), sdk.ToolCallStatusPending
		tc := sdk.ToolCallUpdate{ToolCallId: sdk.ToolCallId(p.Tool.ID), Kind: &kind, Status: &status}
		if p.Title != "" {
			tc.Title = &p.Title
		}
		var in any
		if len(p.Tool.Input) > 0 && json.Unmarshal(p.Tool.Input, &in) == nil {
			tc.RawInput = in
		}
		opts := make([]sdk.PermissionOption, 0, len(p.Options))
		for _, o := range p.Options {
			opts = append(opts, sdk.PermissionOption{OptionId: sdk.PermissionOptionId(o.ID), Name: o.Name, Kind: sdk.PermissionOptionKind(o.Kind)})
		}
		r, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: sdk.SessionId(sid), ToolCall: tc, Options: opts})
		if err != nil {
			a.log.Warn("outpost acp: session/request_permission failed; the tool call is refused", "session", sid, "error", err)
			return "", err
		}
		if r.Outcome.Selected != nil {
			return string(r.Outcome.Selected.OptionId), nil
		}
		return "", nil
	}
}
