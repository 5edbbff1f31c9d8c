// Package acp makes outpost an Agent Client Protocol agent
// (https://agentclientprotocol.com): an editor (Zed, JetBrains, Neovim)
// or any ACP client starts `outpost acp` and talks JSON-RPC to it over
// standard input and output, and every ACP session is an outpost
// conversation whose prompts are turns of a coding agent in a sandbox,
// run by engine.Run (docs/acp.md).
//
// The protocol is github.com/coder/acp-go-sdk's (imported as sdk); this
// package is the sdk.Agent over the engine, and a guard in front of the
// SDK's reader that answers what the SDK would drop: lines that are not
// JSON, that are not JSON-RPC, or that are too long.
//
// A session's id is its conversation's id, chosen at session/new
// (engine.Turn.ID), so a session that ran a turn is stored and another
// `outpost acp` process loads it (session/load replays its history
// through the preset's harness.History, then takes prompts).
package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
)

// Options configure an Agent.
type Options struct {
	// Defaults are every session's settings (the command line's flags);
	// a session's _meta.outpost overrides them (Settings).
	Defaults Settings
	// Store keeps the sessions' conversations; required. Spool keeps a
	// turn's conversation the store could not take (engine.RunOptions).
	Store conversation.Store
	Spool *conversation.Spool
	// Env are explicit variables for the agent (the CLI's --env).
	Env map[string]string
	// Agents resolves an agent name to its preset; nil: the built-in
	// presets (presets.Lookup).
	Agents func(name string) (*harness.Harness, error)
	// Version is outpost's, in initialize's agentInfo.
	Version string
	// Logger receives a record per turn and the protocol's diagnostics;
	// nil: none.
	Logger *slog.Logger
	// MaxLine bounds one incoming JSON-RPC message in bytes (default
	// DefaultMaxLine): a longer one is answered with an Invalid request
	// error and skipped.
	MaxLine int
	// Environ is the host environment variables resolve from (default
	// os.Environ()).
	Environ []string
	// Grace is how long running turns may go on once the input ended
	// before they are cancelled (default DefaultGrace; negative: none).
	Grace time.Duration
	// SandboxIdle is how long a session keeps its sandbox between
	// prompts (default DefaultSandboxIdle; negative: a sandbox a prompt).
	SandboxIdle time.Duration
}

// DefaultGrace is Options.Grace's default, as `outpost mcp`'s.
const DefaultGrace = 30 * time.Second

// DefaultMaxLine bounds an incoming message: below the SDK's own 10 MiB
// bound, past which its reader would end the connection.
const DefaultMaxLine = 8 << 20

// Agent is outpost as an ACP agent: the sdk.Agent (and sdk.AgentLoader)
// whose sessions are conversations. Serve runs it on a connection.
type Agent struct {
	o    Options
	log  *slog.Logger
	conn *sdk.AgentSideConnection

	mu       sync.Mutex
	sessions map[string]*session
	ended    bool // the input ended and its grace passed: no turn begins
	turns    sync.WaitGroup
}

var (
	_ sdk.Agent       = (*Agent)(nil)
	_ sdk.AgentLoader = (*Agent)(nil)
)

// New returns an Agent; it checks the defaults' sandbox and agent names.
func New(o Options) (*Agent, error) {
	if o.Store == nil {
		return nil, outpost.Errorf(outpost.Configuration, "acp", "no conversation store")
	}
	if o.Agents == nil {
		o.Agents = builtin
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.SandboxIdle == 0 {
		o.SandboxIdle = DefaultSandboxIdle
	}
	if o.Defaults.Agent == "" {
		o.Defaults.Agent = "echo"
	}
	if o.Defaults.Sandbox == "" {
		o.Defaults.Sandbox = "local"
	}
	if err := o.Defaults.check(); err != nil {
		return nil, err
	}
	if _, err := o.Agents(o.Defaults.Agent); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{o: o, log: log, sessions: map[string]*session{}}, nil
}

func builtin(name string) (*harness.Harness, error) {
	if h, ok := presets.Lookup(name); ok {
		return h, nil
	}
	return nil, outpost.Errorf(outpost.Configuration, "agent", "unknown agent %q (known: %v)", name, presets.Names())
}

// Serve speaks ACP on in and out until in ends or ctx does. When in
// ends, every request read is still answered: running turns may go on
// for Options.Grace, then they are cancelled (their prompts answer
// cancelled). When ctx ends, they are cancelled at once. Serve returns
// once the turns ended (their sandboxes released, their conversations
// stored). An Agent serves one connection.
func (a *Agent) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	g := newGuard(a.o.MaxLine, a.log)
	w := &lineWriter{w: out, g: g}
	g.w = w
	pr, pw := io.Pipe()
	a.conn = sdk.NewAgentSideConnection(a, w, pr)
	a.conn.SetLogger(a.log)
	// The guard starts once conn is set: no handler runs before.
	eof := make(chan struct{})
	go func() { g.run(in, pw); close(eof) }()
	select {
	case <-eof:
		a.drain(g)
		_ = pw.Close()
	case <-a.conn.Done():
	case <-ctx.Done():
		a.cancelAll()
		_ = pw.CloseWithError(ctx.Err())
	}
	a.cancelAll()
	a.turns.Wait()
	a.releaseAll()
	return g.err()
}

// drain waits for the answers of the requests read before the end of
// input: Grace for the running turns, then they are cancelled and their
// prompts answer soon after (a bound of DrainLimit in all).
func (a *Agent) drain(g *guard) {
	if g.waitIdle(a.o.Grace) {
		return
	}
	a.log.Info("outpost acp: input ended; cancelling the running turns", "grace", a.o.Grace)
	a.end()
	if !g.waitIdle(DrainLimit) {
		a.log.Warn("outpost acp: requests left unanswered at the end of input", "requests", g.pendingCount())
	}
}

// DrainLimit bounds the wait for the answers of cancelled turns at the
// end of input.
const DrainLimit = 2 * time.Minute

// end cancels the running turns and every turn still to begin.
func (a *Agent) end() {
	a.mu.Lock()
	a.ended = true
	a.mu.Unlock()
	a.cancelAll()
}

// Initialize advertises what outpost's sessions do: load and resume
// stored conversations, close sessions, text and embedded text
// resources in prompts.
func (a *Agent) Initialize(_ context.Context, p sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	title := "outpost: coding agents in sandboxes"
	return sdk.InitializeResponse{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		AgentInfo:       &sdk.Implementation{Name: "outpost", Title: &title, Version: a.o.Version},
		AgentCapabilities: sdk.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: sdk.PromptCapabilities{EmbeddedContext: true},
			SessionCapabilities: sdk.SessionCapabilities{
				Close:  &sdk.SessionCloseCapabilities{},
				Resume: &sdk.SessionResumeCapabilities{},
			},
		},
		AuthMethods: []sdk.AuthMethod{},
	}, nil
}

// Authenticate: outpost has no authentication of its own (the agents'
// credentials are the host's, docs/security.md).
func (a *Agent) Authenticate(context.Context, sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	return sdk.AuthenticateResponse{}, nil
}

// NewSession opens a session: a conversation id chosen now, stored once
// its first turn ran. Its settings are the defaults with _meta.outpost
// over them; the agent's credential is checked now (engine.Preflight).
func (a *Agent) NewSession(_ context.Context, p sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	s, err := a.open(conversation.NewID(), p.Cwd, p.Meta, "")
	if err != nil {
		return sdk.NewSessionResponse{}, rpcError(err)
	}
	a.add(s)
	return sdk.NewSessionResponse{SessionId: sdk.SessionId(s.id), Meta: s.meta()}, nil
}

// LoadSession resumes a stored conversation: its history is replayed as
// session/update notifications (the preset's harness.History), then the
// session takes prompts, which continue it.
func (a *Agent) LoadSession(ctx context.Context, p sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	s, m, files, err := a.stored(ctx, string(p.SessionId), p.Cwd, p.Meta)
	if err != nil {
		return sdk.LoadSessionResponse{}, rpcError(err)
	}
	if s.h.History != nil {
		t := conversation.TranscriptOf(m.Native, files)
		u := a.updater(s.id)
		for _, ev := range s.h.History(t) {
			u.replay(ev)
		}
		u.finish()
	}
	a.add(s)
	return sdk.LoadSessionResponse{Meta: s.meta()}, nil
}

// ResumeSession is LoadSession without the replay.
func (a *Agent) ResumeSession(ctx context.Context, p sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	s, _, _, err := a.stored(ctx, string(p.SessionId), p.Cwd, p.Meta)
	if err != nil {
		return sdk.ResumeSessionResponse{}, rpcError(err)
	}
	a.add(s)
	return sdk.ResumeSessionResponse{Meta: s.meta()}, nil
}

// stored opens the session of a stored conversation, with its agent.
func (a *Agent) stored(ctx context.Context, id, cwd string, meta map[string]any) (*session, conversation.Meta, []conversation.File, error) {
	if !conversation.ValidID(id) {
		return nil, conversation.Meta{}, nil, notFound(id)
	}
	m, files, err := a.o.Store.Get(ctx, id)
	if errors.Is(err, conversation.ErrNotFound) {
		return nil, m, nil, notFound(id)
	}
	if err != nil {
		return nil, m, nil, outpost.Wrap(outpost.Conversation, "load", err)
	}
	s, err := a.open(id, cwd, meta, m.Agent)
	if err != nil {
		return nil, m, nil, err
	}
	s.continues = true
	return s, m, files, nil
}

func notFound(id string) error {
	return outpost.Errorf(outpost.Conversation, "session", "session %q: %w", id, conversation.ErrNotFound)
}

// open makes a session's state: its settings, its agent (agent, when
// set: a stored conversation's), its working directory, and the
// credential check.
func (a *Agent) open(id, cwd string, meta map[string]any, agent string) (*session, error) {
	cfg, err := a.o.Defaults.over(meta)
	if err != nil {
		return nil, err
	}
	if agent != "" {
		cfg.Agent = agent
	}
	if !filepath.IsAbs(cwd) {
		return nil, outpost.Errorf(outpost.Configuration, "session", "cwd %q: want an absolute path", cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, outpost.Errorf(outpost.Configuration, "session", "cwd %q: not a directory", cwd)
	}
	h, err := a.o.Agents(cfg.Agent)
	if err != nil {
		return nil, err
	}
	p, err := sandbox.Open(cfg.Sandbox, cfg.Settings)
	if err != nil {
		return nil, err
	}
	hostFiles := p.Capabilities().HostFiles
	_ = p.Close()
	if _, err := engine.Preflight(h, &engine.PreflightOptions{Environ: a.o.Environ, Workdir: cwd, Env: a.o.Env, HostFiles: hostFiles}); err != nil {
		return nil, err
	}
	return &session{id: id, cwd: cwd, cfg: cfg, h: h, kept: kept{idle: a.o.SandboxIdle}}, nil
}

func (a *Agent) add(s *session) {
	a.mu.Lock()
	old := a.sessions[s.id]
	if old != nil {
		old.stop()
	}
	a.sessions[s.id] = s
	a.mu.Unlock()
	if old != nil {
		old.kept.close() // its running turn, if any, releases its own
	}
}

func (a *Agent) session(id sdk.SessionId) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[string(id)]
	if s == nil {
		return nil, notFound(string(id))
	}
	return s, nil
}

// Cancel cancels the session's running turn, if any: its prompt then
// answers stop reason cancelled once the turn ended.
func (a *Agent) Cancel(_ context.Context, p sdk.CancelNotification) error {
	s, err := a.session(p.SessionId)
	if err != nil {
		return rpcError(err)
	}
	s.stop()
	return nil
}

// CloseSession cancels the session's turn and forgets the session (its
// conversation stays stored).
func (a *Agent) CloseSession(_ context.Context, p sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.CloseSessionResponse{}, rpcError(err)
	}
	s.stop()
	a.mu.Lock()
	delete(a.sessions, s.id)
	a.mu.Unlock()
	s.kept.close()
	return sdk.CloseSessionResponse{}, nil
}

func (a *Agent) cancelAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.sessions {
		s.stop()
	}
}

// releaseAll releases the sessions' kept sandboxes, at once.
func (a *Agent) releaseAll() {
	a.mu.Lock()
	var wg sync.WaitGroup
	for _, s := range a.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.kept.close()
		}()
	}
	a.mu.Unlock()
	wg.Wait()
}

// ListSessions is not offered (not advertised).
func (a *Agent) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionList)
}

// SetSessionMode is not offered: outpost's sessions have no modes.
func (a *Agent) SetSessionMode(context.Context, sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	return sdk.SetSessionModeResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetMode)
}

// SetSessionConfigOption is not offered: settings go in _meta.
func (a *Agent) SetSessionConfigOption(context.Context, sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetConfigOption)
}

// rpcError is err as a JSON-RPC error: outpost's error in data (code,
// message, details, exit_code), the JSON-RPC code from its kind: -32002
// (ACP's resource not found) for an unknown session or conversation,
// -32602 (invalid params) for configuration and refused, -32603
// (internal error) for the rest.
func rpcError(err error) error {
	var re *sdk.RequestError
	if errors.As(err, &re) {
		return re
	}
	ej := outpost.ToJSON(err)
	code := -32603
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		code = -32002
	case ej.Code == outpost.Configuration || ej.Code == outpost.Refused:
		code = -32602
	}
	data := map[string]any{"code": ej.Code, "message": ej.Message, "exit_code": outpost.ExitCode(err)}
	if len(ej.Details) > 0 {
		data["details"] = ej.Details
	}
	return &sdk.RequestError{Code: code, Message: fmt.Sprintf("outpost: %s: %s", ej.Code, ej.Message), Data: data}
}
