package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// client is one turn's ACP client: the engine calls Decode on its output
// reader, Send and Interrupt on other goroutines; mu guards everything.
type client struct {
	mu  sync.Mutex
	cfg Config
	in  harness.Input
	s   settings
	cmd harness.Command

	next    int64
	pending map[int64]string // request id -> method

	session   string
	loading   bool // session/load sent, not answered: its updates are history
	prompting int64
	queued    []string
	cancelled bool // the turn was interrupted: no further prompt
	steering  bool // a session/cancel for steer=interrupt is out
	done      bool
	asking    *harness.Asking               // the caller answers permissions (permissions=ask)
	askCtx    context.Context               // the turn's, for the caller's answers
	asks      map[string]context.CancelFunc // the caller's open questions, by request id
	agentErr  bool                          // the agent reported the prompt failed in a chunk (Config.AgentText)

	turn      int // prompts sent, for event ids
	msgs      int // message and thought blocks of this prompt
	last      string
	text      strings.Builder // the answer since the last tool call
	tools     map[string]toolInfo
	usage     *harness.Usage // the sum of the prompts' usage
	callUsage *harness.Usage // this prompt's model calls' _meta.usage
}

type toolInfo struct {
	kind, title  string
	input        any
	called, done bool // its call, its result reported
}

func newClient(c Config, in harness.Input) (*client, error) {
	s, err := parseSettings(c, in.Options)
	if err != nil {
		return nil, err
	}
	cmd, err := c.command(in, s)
	if err != nil {
		return nil, err
	}
	if in.Conversation != "" && strings.TrimSpace(in.Conversation) != in.Conversation {
		return nil, fmt.Errorf("%s: %q is not a session id", c.Name, in.Conversation)
	}
	return &client{cfg: c, in: in, s: s, cmd: cmd, pending: map[int64]string{}, tools: map[string]toolInfo{}, asks: map[string]context.CancelFunc{}}, nil
}

func (l *client) Command() harness.Command { return l.cmd }

// envelope is one JSON-RPC 2.0 message, either way.
type envelope struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *sdk.RequestError `json:"error,omitempty"`
}

func writeMsg(w io.Writer, m envelope) error {
	m.JSONRPC = "2.0"
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// request writes one request and remembers its method.
func (l *client) request(w io.Writer, method string, params any) (int64, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return 0, err
	}
	l.next++
	id := l.next
	l.pending[id] = method
	return id, writeMsg(w, envelope{ID: json.RawMessage(fmt.Sprint(id)), Method: method, Params: p})
}

func (l *client) notify(w io.Writer, method string, params any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return writeMsg(w, envelope{Method: method, Params: p})
}

func (l *client) Begin(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.request(w, sdk.AgentMethodInitialize, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		// Neither fs nor terminal: the agent uses its own tools, inside
		// the sandbox.
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{}, Terminal: false},
		ClientInfo:         &sdk.Implementation{Name: ClientName, Title: ptr("Outpost"), Version: ClientVersion},
	})
	return err
}

func ptr[T any](v T) *T { return &v }

func (l *client) Done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Send queues text as the next prompt of the session; with steer=interrupt
// it cancels the running prompt first.
func (l *client) Send(w io.Writer, text string) (harness.Steer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done || l.cancelled {
		return harness.SteerQueued, fmt.Errorf("%s: the turn is over", l.cfg.Name)
	}
	if strings.TrimSpace(text) == "" {
		return harness.SteerQueued, nil
	}
	l.queued = append(l.queued, text)
	if l.s.interrupt && l.prompting != 0 && !l.steering {
		l.steering = true
		return harness.SteerQueued, l.notify(w, sdk.AgentMethodSessionCancel, sdk.CancelNotification{SessionId: sdk.SessionId(l.session)})
	}
	return harness.SteerQueued, nil
}

// Interrupt cancels the running prompt (session/cancel); the agent answers
// it with stop reason cancelled. Before the session exists there is
// nothing to cancel: the turn ends, which closes the agent's input.
func (l *client) Interrupt(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done || l.cancelled {
		return nil
	}
	l.cancelled = true
	l.queued = nil
	l.cancelAsks() // the protocol: pending permission requests answer cancelled
	if l.prompting == 0 {
		l.done = true
		return nil
	}
	return l.notify(w, sdk.AgentMethodSessionCancel, sdk.CancelNotification{SessionId: sdk.SessionId(l.session)})
}

// Decode decodes one message of the agent and writes what the protocol
// needs next.
func (l *client) Decode(line []byte, w io.Writer) []harness.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return kit.Guard(line, l.cfg.Name, "ACP message", func() []harness.Event { return l.decode(line, w) })
}

func (l *client) decode(line []byte, w io.Writer) []harness.Event {
	var m envelope
	if err := json.Unmarshal(line, &m); err != nil || (m.Method == "" && len(m.ID) == 0) {
		return []harness.Event{{Type: harness.EventNotice, Kind: "protocol",
			Text: fmt.Sprintf("%s: a %d-byte line of the agent's output is not a JSON-RPC message", l.cfg.Name, len(line))}}
	}
	switch {
	case m.Method != "" && len(m.ID) > 0:
		return l.agentRequest(m, w)
	case m.Method != "":
		if m.Method == sdk.ClientMethodSessionUpdate {
			return l.update(m.Params)
		}
		return nil // an extension notification outpost does not read
	}
	return l.response(m, w)
}

// fail ends the turn with the agent's error: a failure of kind
// turn_failed, which the engine counts as a failed process.
func (l *client) fail(text string) []harness.Event {
	l.done = true
	return []harness.Event{{Type: harness.EventFailure, Kind: harness.KindTurnFailed, Text: text}}
}

// errorText renders a JSON-RPC error with the tag the classifiers read.
func errorText(name, method string, e *sdk.RequestError) string {
	msg := strings.TrimSpace(e.Message)
	if d := dataText(e.Data); d != "" && !strings.Contains(msg, d) {
		msg += ": " + d
	}
	return fmt.Sprintf("%s: %s failed: %s [acp code %d]", name, method, msg, e.Code)
}

// dataText is an error's data as text: its "details" or "message", or the
// compact JSON, bounded.
func dataText(d any) string {
	if d == nil {
		return ""
	}
	if m, ok := d.(map[string]any); ok {
		for _, k := range []string{"details", "message", "error"} {
			if s, ok := m[k].(string); ok && s != "" {
				return clip(s, 2000)
			}
		}
	}
	if s, ok := d.(string); ok {
		return clip(s, 2000)
	}
	b, _ := json.Marshal(d)
	return clip(string(b), 2000)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (l *client) response(m envelope, w io.Writer) []harness.Event {
	var id int64
	if json.Unmarshal(m.ID, &id) != nil {
		return nil
	}
	method, ok := l.pending[id]
	if !ok {
		return nil
	}
	delete(l.pending, id)
	if m.Error != nil {
		if method == sdk.AgentMethodSessionPrompt {
			l.prompting = 0
		}
		return l.fail(errorText(l.cfg.Name, method, m.Error))
	}
	switch method {
	case sdk.AgentMethodInitialize:
		return l.initialized(m.Result, w)
	case sdk.AgentMethodSessionNew:
		var r sdk.NewSessionResponse
		if json.Unmarshal(m.Result, &r) != nil || r.SessionId == "" {
			return l.fail(l.cfg.Name + ": session/new returned no session id")
		}
		l.session = string(r.SessionId)
		ev := harness.Event{Type: harness.EventSession, Session: l.session}
		if r.Models != nil && r.Models.CurrentModelId != "" {
			ev.Details = map[string]any{"model": string(r.Models.CurrentModelId)}
		}
		return append([]harness.Event{ev}, l.prompt(w, l.in.Prompt)...)
	case sdk.AgentMethodSessionLoad, sdk.AgentMethodSessionResume:
		l.loading = false
		l.session = l.in.Conversation
		ev := harness.Event{Type: harness.EventSession, Session: l.session}
		return append([]harness.Event{ev}, l.prompt(w, l.in.Prompt)...)
	case sdk.AgentMethodSessionPrompt:
		l.prompting = 0
		var r sdk.PromptResponse
		if err := json.Unmarshal(m.Result, &r); err != nil {
			return l.fail(fmt.Sprintf("%s: session/prompt returned an unreadable result: %v", l.cfg.Name, err))
		}
		return l.stopped(r, m.Result, w)
	}
	return nil
}

// initialized reads the agent's capabilities and opens the session.
func (l *client) initialized(raw json.RawMessage, w io.Writer) []harness.Event {
	var r sdk.InitializeResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return l.fail(fmt.Sprintf("%s: initialize returned an unreadable result: %v", l.cfg.Name, err))
	}
	if r.ProtocolVersion != sdk.ProtocolVersionNumber {
		return l.fail(fmt.Sprintf("%s: the agent speaks ACP version %d, outpost version %d", l.cfg.Name, r.ProtocolVersion, sdk.ProtocolVersionNumber))
	}
	cwd := l.in.Workdir
	var err error
	switch caps := r.AgentCapabilities; {
	case l.in.Conversation == "":
		_, err = l.request(w, sdk.AgentMethodSessionNew, sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
	case caps.SessionCapabilities.Resume != nil:
		_, err = l.request(w, sdk.AgentMethodSessionResume, sdk.ResumeSessionRequest{SessionId: sdk.SessionId(l.in.Conversation), Cwd: cwd, McpServers: []sdk.McpServer{}})
	case caps.LoadSession:
		l.loading = true
		_, err = l.request(w, sdk.AgentMethodSessionLoad, sdk.LoadSessionRequest{SessionId: sdk.SessionId(l.in.Conversation), Cwd: cwd, McpServers: []sdk.McpServer{}})
	default:
		return l.fail(fmt.Sprintf("%s: the agent offers neither session/load nor session/resume, so its session cannot be continued", l.cfg.Name))
	}
	if err != nil {
		return l.fail(l.cfg.Name + ": " + err.Error())
	}
	return nil
}

// prompt sends text as the session's next prompt.
func (l *client) prompt(w io.Writer, text string) []harness.Event {
	l.turn++
	l.agentErr = false
	l.msgs = 0
	l.callUsage = nil
	l.last = ""
	l.text.Reset()
	id, err := l.request(w, sdk.AgentMethodSessionPrompt, sdk.PromptRequest{
		SessionId: sdk.SessionId(l.session),
		Prompt:    []sdk.ContentBlock{sdk.TextBlock(text)},
	})
	if err != nil {
		return l.fail(l.cfg.Name + ": " + err.Error())
	}
	l.prompting = id
	return nil
}

// stopped handles a prompt's end: its usage, its finished event, and the
// next queued prompt.
func (l *client) stopped(r sdk.PromptResponse, raw json.RawMessage, w io.Writer) []harness.Event {
	var evs []harness.Event
	if u, ok := l.promptUsage(r, raw); ok {
		total := u
		if l.usage != nil {
			total = l.usage.Add(u)
		}
		l.usage = &total
		evs = append(evs, harness.Event{Type: harness.EventUsage, Usage: &total})
	}
	if l.agentErr {
		// The failure event was reported with the chunk: the turn is over.
		l.done = true
		return evs
	}
	if r.StopReason == sdk.StopReasonCancelled {
		if l.steering && !l.cancelled && len(l.queued) > 0 {
			l.steering = false
			next := l.queued[0]
			l.queued = l.queued[1:]
			evs = append(evs, harness.Event{Type: harness.EventNotice, Kind: "steer", Text: l.cfg.Name + ": the running prompt was cancelled for the steering message"})
			return append(evs, l.prompt(w, next)...)
		}
		l.done = true
		return append(evs, harness.Event{Type: harness.EventFailure, Kind: "interrupted", Text: l.cfg.Name + ": the turn was cancelled"})
	}
	fin := harness.Event{Type: harness.EventFinished, Text: strings.TrimSpace(l.text.String()), Stop: string(r.StopReason)}
	if l.usage != nil {
		u := *l.usage
		fin.Usage = &u
	}
	evs = append(evs, fin)
	if len(l.queued) > 0 && !l.cancelled {
		next := l.queued[0]
		l.queued = l.queued[1:]
		l.steering = false
		return append(evs, l.prompt(w, next)...)
	}
	l.done = true
	return evs
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("acp: " + err.Error())) // only outpost's own types: never
	}
	return b
}
