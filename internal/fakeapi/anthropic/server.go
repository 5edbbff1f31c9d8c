// Package anthropic is a fake Anthropic Messages API for tests: a loopback HTTP
// server that answers POST /v1/messages with scripted replies (streamed as real
// SSE, or as one JSON message when the request has stream:false) and records
// every request it receives.
//
// Point Claude Code at it with ANTHROPIC_BASE_URL=<Server.URL()> and any
// ANTHROPIC_API_KEY. The reply to each request is chosen, in order, by:
//  1. the queue (Server.Enqueue), one scenario per request;
//  2. Options.Choose, when it returns ok;
//  3. Options.AfterTool (default Echo) when the last user message carries a tool_result;
//  4. a marker in the last user message text: FAKE_TOOL, FAKE_THINK, FAKE_ECHO,
//     FAKE_SLOW, FAKE_STALL, FAKE_HANG, FAKE_STREAM_ERROR, FAKE_429,
//     FAKE_USAGE_LIMIT, FAKE_529, FAKE_500, FAKE_401, FAKE_403, FAKE_400,
//     FAKE_STRUCTURED (a StructuredOutput tool call with Options.Text as input)
//     (see MarkerScenario; disable with Options.NoMarkers);
//  5. Options.Default (default: Text of Options.Text).
//
// Other paths: HEAD/GET /api/hello (Claude Code's preconnect, sent only when
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC is unset) answers 200,
// POST /v1/messages/count_tokens and GET /v1/models answer plausibly, anything
// else gets a 404 not_found_error. A stream_error scenario answers a
// non-streaming request (the CLI's fallback after a failed stream) with 529.
// Close unblocks stalled and hanging handlers and waits for them.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
)

// TB is the part of testing.TB the server uses; *testing.T and *testing.B satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Defaults.
const (
	DefaultText        = "Hello from the fake model."
	DefaultThinking    = "Let me think about this (fake)."
	DefaultSlowText    = "This slow reply from the fake model streams one word at a time."
	DefaultSlowDelay   = 500 * time.Millisecond
	DefaultToolCommand = "echo hi"
	DefaultInputTokens = 12
	DefaultOutputToken = 7
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Addr is the loopback address to listen on ("" = 127.0.0.1:0, a free port).
	// Non-loopback hosts are refused.
	Addr string
	// Text is the default reply text (default DefaultText).
	Text string
	// Usage is the default usage (default input 12, output 7).
	Usage Usage
	// Model, if set, is reported in message_start instead of the requested model.
	Model string
	// Default is the scenario when nothing else chose one (default Text(Options.Text)).
	Default *Scenario
	// AfterTool is the reply to a request whose last user message carries a
	// tool_result (default Echo). Set NoAfterTool to skip this rule.
	AfterTool   *Scenario
	NoAfterTool bool
	// Choose, if set, picks the scenario for a request; ok=false falls through.
	Choose func(r *Request) (sc Scenario, ok bool)
	// NoMarkers disables choosing scenarios by FAKE_* markers.
	NoMarkers bool
	// ToolCommand is the Bash command of the FAKE_TOOL marker (default "echo hi").
	ToolCommand string
	// SlowDelay is the pause before each delta of a slow reply (default 500ms).
	SlowDelay time.Duration
	// ResetsAt is the reset time of the FAKE_USAGE_LIMIT marker (default now+2h).
	ResetsAt time.Time
	// Verbose logs every request through TB.Logf (or Logf).
	Verbose bool
	// Logf, if set, receives the verbose log instead of TB.Logf.
	Logf func(format string, args ...any)
	// OnRequest, if set, is called with each recorded request (after the
	// scenario is chosen, before the reply is written).
	OnRequest func(r Request)
}

func (o *Options) setDefaults() {
	if o.Text == "" {
		o.Text = DefaultText
	}
	if o.Usage == (Usage{}) {
		o.Usage = Usage{InputTokens: DefaultInputTokens, OutputTokens: DefaultOutputToken}
	}
	if o.ToolCommand == "" {
		o.ToolCommand = DefaultToolCommand
	}
	if o.SlowDelay <= 0 {
		o.SlowDelay = DefaultSlowDelay
	}
}

// Server is a running fake Messages API.
type Server struct {
	opts Options
	tb   TB
	url  string
	life fakeapi.Lifecycle // Close unblocks stalled handlers (life.Done)

	mu       sync.Mutex
	seq      int
	reqs     []Request
	changed  chan struct{} // closed and replaced whenever a request is recorded
	inflight int

	queue fakeapi.Queue[Scenario]
}

// New starts a server. With a non-nil tb, a start failure is fatal and the
// server is closed by tb.Cleanup; with tb == nil, a failure panics and the
// caller must Close the server.
func New(tb TB, opts Options) *Server {
	if tb != nil {
		tb.Helper()
	}
	s, err := Start(opts)
	if err != nil {
		if tb != nil {
			tb.Fatalf("fakeapi/anthropic: %v", err)
			return nil
		}
		panic("fakeapi/anthropic: " + err.Error())
	}
	if tb != nil {
		s.tb = tb
		tb.Cleanup(s.Close)
	}
	return s
}

// Start starts a server and returns it; the caller must Close it.
func Start(opts Options) (*Server, error) {
	opts.setDefaults()
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s := &Server{opts: opts, changed: make(chan struct{})}
	url, err := s.life.ServeOn(addr, http.HandlerFunc(s.serveHTTP))
	if err != nil {
		return nil, err
	}
	s.url = url
	return s, nil
}

// URL returns the base URL, e.g. "http://127.0.0.1:43121" (for ANTHROPIC_BASE_URL).
func (s *Server) URL() string { return s.url }

// Addr returns the listening address, e.g. "127.0.0.1:43121".
func (s *Server) Addr() string { return s.life.Addr() }

// Close stops the server: stalled and slow handlers return, open connections
// are closed, and Close waits for every handler goroutine to finish. It is
// safe to call more than once.
func (s *Server) Close() { s.life.Close() }

// Enqueue appends scenarios to the queue; each POST /v1/messages takes the
// first queued scenario before any other rule applies.
func (s *Server) Enqueue(scs ...Scenario) { s.queue.Push(scs...) }

// Queued returns the number of scenarios still queued.
func (s *Server) Queued() int { return s.queue.Len() }

// Requests returns copies of all recorded requests, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = r.clone()
	}
	return out
}

// MessageRequests returns copies of the recorded POST /v1/messages requests.
func (s *Server) MessageRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.IsMessages() {
			out = append(out, r)
		}
	}
	return out
}

// InFlight returns the number of requests currently being answered.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// WaitMessages waits until at least n POST /v1/messages requests have been
// recorded and returns them, or returns ctx's error.
func (s *Server) WaitMessages(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		ch := s.changed
		count := 0
		for _, r := range s.reqs {
			if r.IsMessages() {
				count++
			}
		}
		s.mu.Unlock()
		if count >= n {
			return s.MessageRequests(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.life.Done():
			return nil, errors.New("fakeapi/anthropic: server closed")
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if !s.opts.Verbose {
		return
	}
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	} else if s.tb != nil {
		s.tb.Logf(format, args...)
	}
}

// RefusedURL returns the base URL of a loopback port on which nothing listens
// (connections are refused), for "no server" tests (fakeapi.RefusedURL).
func RefusedURL() (string, error) { return fakeapi.RefusedURL() }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.life.Enter() {
		http.Error(w, "server closed", http.StatusServiceUnavailable)
		return
	}
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
		s.life.Leave()
	}()

	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	req := Request{
		Time:          time.Now(),
		Method:        r.Method,
		Path:          r.URL.Path,
		RawQuery:      r.URL.RawQuery,
		Header:        r.Header.Clone(),
		Body:          body,
		APIKey:        r.Header.Get("x-api-key"),
		Authorization: r.Header.Get("authorization"),
	}
	if len(body) > 0 {
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			req.JSON = m
		}
	}

	var sc Scenario
	switch {
	case req.IsMessages():
		req.fillMessages()
		sc = s.choose(&req)
		req.Scenario = sc.name()
	}
	s.record(&req)
	s.logf("fakeapi/anthropic: #%d %s %s nmsg=%d scenario=%s last_user=%.80q",
		req.Seq, req.Method, req.Path, req.NumMessages, req.Scenario, req.LastUserText)
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(req.clone())
	}

	switch {
	case req.IsMessages():
		finished := s.serveMessages(w, r, &req, sc)
		s.ended(req.Seq, fakeapi.EndOf(finished, r.Context()))
	case req.Path == "/api/hello":
		// Claude Code's preconnect (HEAD before the first POST).
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "OK")
		}
	case r.Method == http.MethodPost && req.Path == "/v1/messages/count_tokens":
		n := len(body) / 4
		if n < 1 {
			n = 1
		}
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": n})
	case r.Method == http.MethodGet && req.Path == "/v1/models":
		writeJSON(w, http.StatusOK, map[string]any{
			"data": []map[string]any{{
				"type": "model", "id": s.modelOr("claude-opus-5-5"), "display_name": "Fake model",
				"created_at": "2026-01-01T00:00:00Z",
			}},
			"has_more": false, "first_id": s.modelOr("claude-opus-5-5"), "last_id": s.modelOr("claude-opus-5-5"),
		})
	default:
		writeAPIError(w, http.StatusNotFound, "not_found_error",
			fmt.Sprintf("fake: no route for %s %s", r.Method, req.Path), req.Seq)
	}
}

func (s *Server) modelOr(m string) string {
	if s.opts.Model != "" {
		return s.opts.Model
	}
	return m
}

// ended records how the reply to request seq ended.
func (s *Server) ended(seq int, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.reqs {
		if s.reqs[i].Seq == seq {
			s.reqs[i].Ended = how
		}
	}
}

func (s *Server) record(req *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	req.Seq = s.seq
	s.reqs = append(s.reqs, req.clone())
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) choose(req *Request) Scenario {
	if sc, ok := s.queue.Pop(); ok {
		return sc
	}
	if s.opts.Choose != nil {
		if sc, ok := s.opts.Choose(req); ok {
			return sc
		}
	}
	if req.HasToolResult && !s.opts.NoAfterTool {
		if s.opts.AfterTool != nil {
			return *s.opts.AfterTool
		}
		return Echo()
	}
	if !s.opts.NoMarkers {
		if sc, ok := MarkerScenario(req.LastUserText, &s.opts); ok {
			return sc
		}
	}
	if s.opts.Default != nil {
		return *s.opts.Default
	}
	return Text(s.opts.Text)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeAPIError(w http.ResponseWriter, status int, typ, msg string, seq int) {
	w.Header().Set("request-id", fmt.Sprintf("req_fake_%d", seq))
	w.Header().Set("x-should-retry", "false")
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": fmt.Sprintf("req_fake_%d", seq),
	})
}

// block is one content block of a reply, before streaming.
type replyBlock struct {
	typ       string // text, thinking, tool_use
	text      string // text or thinking
	signature string
	tool      *ToolCall
}

// serveMessages answers a Messages request; finished reports whether the
// whole reply was written (an error answer included).
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request, req *Request, sc Scenario) (finished bool) {
	ctx := r.Context()
	for k, vs := range sc.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("request-id", fmt.Sprintf("req_fake_%d", req.Seq))

	if sc.Kind != KindSlow && sc.Delay > 0 && !s.life.Wait(ctx, sc.Delay) {
		return
	}
	switch sc.Kind {
	case KindHang:
		s.life.Block(ctx)
		return
	case KindError:
		status := sc.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		typ := sc.ErrorType
		if typ == "" {
			typ = "api_error"
		}
		msg := sc.ErrorMessage
		if msg == "" {
			msg = http.StatusText(status)
		}
		b, _ := json.Marshal(map[string]any{
			"type":       "error",
			"error":      map[string]any{"type": typ, "message": msg},
			"request_id": fmt.Sprintf("req_fake_%d", req.Seq),
		})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, err := w.Write(b)
		return err == nil
	}

	usage := s.opts.Usage
	if sc.Usage != nil {
		usage = *sc.Usage
	}
	model := req.Model
	if s.opts.Model != "" {
		model = s.opts.Model
	}
	if model == "" {
		model = "claude-opus-5-5"
	}
	msgID := fmt.Sprintf("msg_fake_%d", req.Seq)

	var blocks []replyBlock
	stop := "end_turn"
	text := sc.Text
	switch sc.Kind {
	case KindThinking:
		th := sc.Thinking
		if th == "" {
			th = DefaultThinking
		}
		if text == "" {
			text = s.opts.Text
		}
		blocks = append(blocks, replyBlock{typ: "thinking", text: th, signature: fmt.Sprintf("fakesig_%d", req.Seq)},
			replyBlock{typ: "text", text: text})
	case KindToolUse:
		if text != "" {
			blocks = append(blocks, replyBlock{typ: "text", text: text})
		}
		tc := ToolCall{Name: "Bash", Input: json.RawMessage(`{}`)}
		if sc.Tool != nil {
			tc = *sc.Tool
		}
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("toolu_fake_%d", req.Seq)
		}
		if len(tc.Input) == 0 {
			tc.Input = json.RawMessage(`{}`)
		}
		blocks = append(blocks, replyBlock{typ: "tool_use", tool: &tc})
		stop = "tool_use"
	case KindEcho:
		blocks = append(blocks, replyBlock{typ: "text",
			text: fmt.Sprintf("ECHO nmsg=%d last_user=%s", req.NumMessages, req.LastUserText)})
	case KindSlow:
		if text == "" {
			text = DefaultSlowText
		}
		blocks = append(blocks, replyBlock{typ: "text", text: text})
	case KindStall, KindStreamError:
	default: // KindText and unknown kinds
		if text == "" {
			text = s.opts.Text
		}
		blocks = append(blocks, replyBlock{typ: "text", text: text})
	}
	if sc.StopReason != "" {
		stop = sc.StopReason
	}

	if !req.Stream {
		if sc.Kind == KindStall {
			s.life.Block(ctx)
			return
		}
		if sc.Kind == KindStreamError {
			writeAPIError(w, 529, "overloaded_error", "Overloaded", req.Seq)
			return
		}
		if sc.Kind == KindSlow {
			d := sc.Delay
			if d <= 0 {
				d = s.opts.SlowDelay
			}
			if !s.life.Wait(ctx, d) {
				return
			}
		}
		content := make([]map[string]any, 0, len(blocks))
		for _, b := range blocks {
			content = append(content, blockJSON(b, true))
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": usageJSON(usage.InputTokens, usage.OutputTokens),
		})
		return true
	}

	// Streaming.
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(name string, data any) bool {
		if err := WriteEvent(w, name, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": usageJSON(usage.InputTokens, 1),
	}}) {
		return
	}
	switch sc.Kind {
	case KindStall:
		s.life.Block(ctx)
		return
	case KindStreamError:
		send("error", map[string]any{"type": "error", "error": map[string]any{
			"type": "overloaded_error", "message": "Overloaded"}})
		return
	}
	if !send("ping", map[string]any{"type": "ping"}) {
		return
	}
	delay := time.Duration(0)
	if sc.Kind == KindSlow {
		delay = sc.Delay
		if delay <= 0 {
			delay = s.opts.SlowDelay
		}
	}
	for i, b := range blocks {
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": blockJSON(b, false)}) {
			return
		}
		for _, delta := range deltas(b) {
			if !s.life.Wait(ctx, delay) {
				return
			}
			if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": delta}) {
				return
			}
		}
		if !send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) {
			return
		}
	}
	if !send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": usageJSON(usage.InputTokens, usage.OutputTokens)}) {
		return
	}
	return send("message_stop", map[string]any{"type": "message_stop"})
}

func usageJSON(in, out int) map[string]any {
	return map[string]any{
		"input_tokens":                in,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
		"output_tokens":               out,
		"service_tier":                "standard",
	}
}

// blockJSON renders a block for content_block_start (full=false: empty
// payload) or for a non-streaming message (full=true).
func blockJSON(b replyBlock, full bool) map[string]any {
	switch b.typ {
	case "thinking":
		if full {
			return map[string]any{"type": "thinking", "thinking": b.text, "signature": b.signature}
		}
		return map[string]any{"type": "thinking", "thinking": "", "signature": ""}
	case "tool_use":
		if full {
			return map[string]any{"type": "tool_use", "id": b.tool.ID, "name": b.tool.Name, "input": b.tool.Input}
		}
		return map[string]any{"type": "tool_use", "id": b.tool.ID, "name": b.tool.Name, "input": map[string]any{}}
	default:
		if full {
			return map[string]any{"type": "text", "text": b.text}
		}
		return map[string]any{"type": "text", "text": ""}
	}
}

// deltas splits a block's payload into content_block_delta "delta" objects.
func deltas(b replyBlock) []map[string]any {
	var out []map[string]any
	switch b.typ {
	case "thinking":
		for _, p := range splitWords(b.text) {
			out = append(out, map[string]any{"type": "thinking_delta", "thinking": p})
		}
		out = append(out, map[string]any{"type": "signature_delta", "signature": b.signature})
	case "tool_use":
		in := string(b.tool.Input)
		// Two chunks, like the real API's partial JSON.
		half := len(in) / 2
		out = append(out, map[string]any{"type": "input_json_delta", "partial_json": in[:half]},
			map[string]any{"type": "input_json_delta", "partial_json": in[half:]})
	default:
		for _, p := range splitWords(b.text) {
			out = append(out, map[string]any{"type": "text_delta", "text": p})
		}
	}
	return out
}

// splitWords splits s after each space, so that the pieces join back to s.
func splitWords(s string) []string {
	if s == "" {
		return []string{""}
	}
	parts := strings.SplitAfter(s, " ")
	out := parts[:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
