package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// MetaKey is the key of outpost's settings in a session request's _meta:
// {"_meta": {"outpost": {"sandbox": "docker", "budget": 200000}}}.
const MetaKey = "outpost"

// Settings are a session's: what `outpost acp`'s flags give every session
// and a session/new, session/load or session/resume request's
// _meta.outpost overrides, field by field (Settings and Options key by
// key). The JSON names are _meta's.
type Settings struct {
	// Agent is the preset (ignored on load and resume: the conversation's
	// agent continues it); Model the model it is asked for.
	Agent string `json:"agent,omitempty"`
	Model string `json:"model,omitempty"`
	// Sandbox is the provider; Settings its settings (--set,
	// docs/sandboxes/settings.md).
	Sandbox  string            `json:"sandbox,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	// Options are the preset's options (--option).
	Options map[string]string `json:"options,omitempty"`
	// Secrets, Egress and EgressAllow are the keyless turn's modes
	// (docs/security.md).
	Secrets     string   `json:"secrets,omitempty"`
	Egress      string   `json:"egress,omitempty"`
	EgressAllow []string `json:"egress_allow,omitempty"`
	// Budget is the conversation's token budget, MaxTokens each turn's
	// (docs/metering.md).
	Budget    int64 `json:"budget,omitempty"`
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// Timeout bounds each turn: a Go duration ("10m"); "": none.
	Timeout string `json:"timeout,omitempty"`
	// Checkpoint is "on" (the default) or "off" (docs/workspaces.md).
	Checkpoint string `json:"checkpoint,omitempty"`
}

// over is s with the request's _meta.outpost over it. Unknown fields are
// refused: a misspelt setting must not be silently ignored.
func (s Settings) over(meta map[string]any) (Settings, error) {
	raw, ok := meta[MetaKey]
	if !ok || raw == nil {
		return s, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return s, outpost.Errorf(outpost.Configuration, "session", "_meta.%s: %v", MetaKey, err)
	}
	var o Settings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return s, outpost.Errorf(outpost.Configuration, "session", "_meta.%s: %v", MetaKey, err)
	}
	out := s
	out.Settings, out.Options = merged(s.Settings, o.Settings), merged(s.Options, o.Options)
	for _, f := range []struct{ dst, src *string }{{&out.Agent, &o.Agent}, {&out.Model, &o.Model}, {&out.Sandbox, &o.Sandbox},
		{&out.Secrets, &o.Secrets}, {&out.Egress, &o.Egress}, {&out.Timeout, &o.Timeout}, {&out.Checkpoint, &o.Checkpoint}} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	if o.EgressAllow != nil {
		out.EgressAllow = o.EgressAllow
	}
	if o.Budget != 0 {
		out.Budget = o.Budget
	}
	if o.MaxTokens != 0 {
		out.MaxTokens = o.MaxTokens
	}
	return out, out.check()
}

func merged(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// check refuses settings no turn could run with.
func (s Settings) check() error {
	bad := func(format string, args ...any) error {
		return outpost.Errorf(outpost.Configuration, "session", format, args...)
	}
	if !slices.Contains(sandbox.Providers(), s.Sandbox) {
		return bad("sandbox %q (known: %v)", s.Sandbox, sandbox.Providers())
	}
	if s.Budget < 0 || s.MaxTokens < 0 {
		return bad("budget and max_tokens take a positive number of tokens")
	}
	if _, err := s.timeout(); err != nil {
		return err
	}
	return nil
}

func (s Settings) timeout() (time.Duration, error) {
	if s.Timeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s.Timeout)
	if err != nil || d <= 0 {
		return 0, outpost.Errorf(outpost.Configuration, "session", "timeout %q: want a duration above zero such as 10m", s.Timeout)
	}
	return d, nil
}

// session is one ACP session: a conversation, and its running turn.
type session struct {
	id  string // the conversation's id
	cwd string
	cfg Settings
	h   *harness.Harness

	mu sync.Mutex
	// continues: the conversation is stored, so a prompt resumes it.
	continues bool
	// cancel ends the running turn; nil when none runs.
	cancel context.CancelFunc

	kept kept // the sandbox kept between prompts
}

// meta is what a session response's _meta.outpost says of the session.
func (s *session) meta() map[string]any {
	return map[string]any{MetaKey: map[string]any{"conversation": s.id, "agent": s.h.Name, "sandbox": s.cfg.Sandbox}}
}

// begin marks a turn running, with ctx's cancel; a session runs one turn
// at a time.
func (s *session) begin(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil, nil, outpost.Errorf(outpost.Conversation, "prompt", "session %s is running a turn: wait for its answer or cancel it", s.id).Detail("busy", true)
	}
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	return ctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel()
	}, nil
}

// stop cancels the running turn, if any.
func (s *session) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
}

// turn is the engine's turn of a prompt on the session.
func (s *session) turn(prompt string, env map[string]string) (engine.Turn, error) {
	timeout, err := s.cfg.timeout()
	if err != nil {
		return engine.Turn{}, err
	}
	t := engine.Turn{
		Agent:   harness.Agent{Kind: harness.KindCLI, Harness: s.h, Model: s.cfg.Model},
		Prompt:  prompt,
		Workdir: s.cwd,
		Env:     env,
		Options: s.turnOptions(),
		Timeout: timeout,
	}
	s.mu.Lock()
	if s.continues {
		t.Resume = s.id
	} else {
		t.ID = s.id
	}
	s.mu.Unlock()
	return t, nil
}

func (s *session) String() string {
	return fmt.Sprintf("session %s (%s on %s)", s.id, s.h.Name, s.cfg.Sandbox)
}
