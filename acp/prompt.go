package acp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox"
)

// Prompt runs one turn on the session's conversation (a resume once it is
// stored): its events stream as session/update notifications, then the
// answer is the stop reason: end_turn, cancelled (session/cancel, or the
// request's $/cancel_request), max_tokens (a spent --budget or
// --max-tokens, or the agent's own), refusal. Any other failure is a
// JSON-RPC error holding outpost's (rpcError); the conversation is stored
// all the same when the turn got that far, and the next prompt continues
// it.
func (a *Agent) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.PromptResponse{}, rpcError(err)
	}
	text, err := promptText(p.Prompt)
	if err != nil {
		return sdk.PromptResponse{}, rpcError(err)
	}
	t, err := s.turn(text, a.o.Env)
	if err != nil {
		return sdk.PromptResponse{}, rpcError(err)
	}
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return sdk.PromptResponse{}, rpcError(err)
	}
	defer done()
	a.mu.Lock()
	ended := a.ended
	a.mu.Unlock()
	if ended {
		done() // the input ended: the turn is cancelled before it begins
	}
	a.turns.Add(1)
	defer a.turns.Done()
	start := time.Now()
	u := a.updater(s.id)
	res, kept, err := a.run(ctx, s, t, u)
	if res != nil {
		u.usage(ctx, a, res)
	}
	u.finish()
	if res != nil && res.Conversation == s.id {
		s.mu.Lock()
		s.continues = true
		s.mu.Unlock()
	}
	if err != nil && ctx.Err() != nil {
		// Cancelled (session/cancel, $/cancel_request, the end of input),
		// whatever step the turn was at: the protocol's answer is
		// cancelled, never an error.
		err = &outpost.Error{Code: outpost.Cancelled, Op: "prompt", Err: err}
	}
	stop, err := stopReason(u.stop, err)
	a.log.Info("outpost acp: turn", "session", s.id, "agent", s.h.Name, "sandbox", s.cfg.Sandbox, "sandbox_kept", kept, "stop", stop, "error", err, "ms", time.Since(start).Milliseconds())
	if err != nil {
		return sdk.PromptResponse{}, rpcError(err)
	}
	resp := sdk.PromptResponse{StopReason: stop}
	if res != nil {
		resp.Usage = turnUsage(res)
		resp.Meta = map[string]any{MetaKey: map[string]any{"conversation": res.Conversation, "duration_ms": res.DurationMS, "secrets": res.Secrets, "egress": res.Egress, "sandbox_kept": kept}}
	}
	return resp, nil
}

// run runs the turn on the session's kept sandbox, or else on a new one,
// which the session keeps for its next prompt when the turn succeeded
// (kept). onKept reports whether the turn ran on the kept sandbox.
func (a *Agent) run(ctx context.Context, s *session, t engine.Turn, u *updater) (res *engine.Result, onKept bool, err error) {
	p, lease := s.kept.take()
	if lease != nil && lease.Vanished(ctx) {
		// Gone while kept (a container removed, a daemon restarted): the
		// prompt gets a new one rather than a failure.
		release(p, lease)
		p, lease = nil, nil
	}
	if lease == nil {
		if p, err = sandbox.Open(s.cfg.Sandbox, s.cfg.Settings); err != nil {
			return nil, false, err
		}
	}
	c := s.cfg
	var left *sandbox.Lease
	o := &engine.RunOptions{
		Provider: p, Store: a.o.Store, Spool: a.o.Spool, OnEvent: u.event, Environ: a.o.Environ,
		Secrets: c.Secrets, Egress: c.Egress, EgressAllow: c.EgressAllow, MaxTokens: c.MaxTokens, Budget: c.Budget,
		Checkpoint: c.Checkpoint, Logger: a.log, Permission: a.ask(s.id, u),
	}
	switch {
	case lease != nil:
		o.Provider, o.Lease = nil, lease
	case s.kept.keeps():
		o.Keep = func(l *sandbox.Lease) { left = l }
	}
	res, err = engine.Run(ctx, t, o)
	switch {
	case lease != nil && err == nil:
		s.kept.put(p, lease)
	case lease != nil:
		release(p, lease) // a turn that failed leaves no sandbox kept
	case left != nil:
		s.kept.put(p, left)
	default:
		_ = p.Close()
	}
	return res, lease != nil, err
}

// stopReason is how a turn that ended with err answers its prompt: the
// agent's own stop (finished event) when it succeeded, cancelled and
// max_tokens for those ends, err for any other.
func stopReason(native string, err error) (sdk.StopReason, error) {
	switch outpost.CodeOf(err) {
	case "":
	case outpost.Cancelled:
		return sdk.StopReasonCancelled, nil
	case outpost.Budget:
		return sdk.StopReasonMaxTokens, nil
	default:
		return "", err
	}
	switch strings.ToLower(native) {
	case "max_tokens", "length", "max_output_tokens":
		return sdk.StopReasonMaxTokens, nil
	case "refusal", "content_filter":
		return sdk.StopReasonRefusal, nil
	case "max_turns", "max_turn_requests":
		return sdk.StopReasonMaxTurnRequests, nil
	}
	return sdk.StopReasonEndTurn, nil
}

// promptText is the prompt's blocks as the agent's prompt: text as it is,
// a resource link as a line naming it, an embedded text resource as its
// text in a fenced block under its URI. Images, audio and binary
// resources are refused (not advertised).
func promptText(blocks []sdk.ContentBlock) (string, error) {
	var parts []string
	for i, b := range blocks {
		switch {
		case b.Text != nil:
			parts = append(parts, b.Text.Text)
		case b.ResourceLink != nil:
			parts = append(parts, fmt.Sprintf("[%s](%s)", b.ResourceLink.Name, b.ResourceLink.Uri))
		case b.Resource != nil && b.Resource.Resource.TextResourceContents != nil:
			r := b.Resource.Resource.TextResourceContents
			parts = append(parts, fmt.Sprintf("%s:\n```\n%s\n```", r.Uri, strings.TrimSuffix(r.Text, "\n")))
		default:
			return "", outpost.Errorf(outpost.Configuration, "prompt", "prompt block %d: only text, resource links and text resources are taken", i)
		}
	}
	text := strings.Join(parts, "\n\n")
	if strings.TrimSpace(text) == "" {
		return "", outpost.Errorf(outpost.Configuration, "prompt", "empty prompt")
	}
	return text, nil
}

// turnUsage is the turn's usage in the prompt response's shape.
func turnUsage(res *engine.Result) *sdk.Usage {
	u := res.Usage
	cr, cw := int(u.CacheReadTokens), int(u.CacheWriteTokens)
	return &sdk.Usage{InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens), CachedReadTokens: &cr, CachedWriteTokens: &cw,
		TotalTokens: int(u.Tokens())}
}

// errClientGone: a notification could not be written; the turn goes on
// (and is stored), its updates lost with the client.
var errClientGone = errors.New("the client is gone")
