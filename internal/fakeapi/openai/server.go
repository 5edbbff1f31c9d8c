// Package openai is a fake OpenAI API for tests. It listens on loopback and serves the
// Responses API (POST /v1/responses, server-sent events, as the Codex CLI uses it) and
// Chat Completions (POST /v1/chat/completions, streaming with stream_options.include_usage,
// as Copilot CLI BYOK uses it). Every request is recorded; the reply to each one is a
// Scenario taken from a queue, from a chooser function, or from a marker such as FAKE_TOOL
// in the last user text.
package openai

import (
	"bytes"
	"compress/gzip"
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

// API names the wire protocol a request used.
type API string

const (
	// APIResponses is POST /v1/responses.
	APIResponses API = "responses"
	// APIChat is POST /v1/chat/completions.
	APIChat API = "chat"
	// APIOther is any other path (answered 404, or a model list for GET /v1/models).
	APIOther API = "other"
)

// Usage is the token usage a scripted reply reports. CachedTokens is part of
// InputTokens and ReasoningTokens is part of OutputTokens, as in the OpenAI APIs.
type Usage struct {
	InputTokens     int
	CachedTokens    int
	OutputTokens    int
	ReasoningTokens int
}

// TotalTokens is InputTokens + OutputTokens.
func (u Usage) TotalTokens() int { return u.InputTokens + u.OutputTokens }

// Config sets the server's defaults. The zero value is usable.
type Config struct {
	// Text is the default assistant reply (default DefaultText).
	Text string
	// Reasoning is the default reasoning summary (default DefaultReasoning).
	Reasoning string
	// Usage is the default usage of a successful reply (default DefaultUsage).
	Usage *Usage
	// Command is the default command of a tool call (default DefaultCommand).
	Command string
	// Patch is the default apply_patch input (default DefaultPatch).
	Patch string
	// DeltaDelay is the pause before each delta of a slow stream (default 200ms).
	DeltaDelay time.Duration
	// SlowChunks is the number of deltas of a slow stream (default 30).
	SlowChunks int
	// Model is reported when a request names none (default "gpt-fake").
	Model string
	// Choose, when set, picks the scenario of a request the queue did not answer. A zero
	// Scenario (Kind "") falls through to the built-in choice (tool follow-up, markers, text).
	Choose func(*Request) Scenario
	// Logf, when set, receives one line per request.
	Logf func(format string, args ...any)
}

// Defaults used when Config leaves a field empty.
const (
	DefaultText      = "Hello from the fake model."
	DefaultReasoning = "Thinking about the answer"
	DefaultCommand   = "echo hi; echo bye >&2"
	DefaultPatch     = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the fake model\n*** End Patch\n"
)

// DefaultUsage is the usage of a reply when neither Config nor Scenario sets one.
var DefaultUsage = Usage{InputTokens: 100, CachedTokens: 20, OutputTokens: 10, ReasoningTokens: 3}

// Request is one recorded request.
type Request struct {
	Seq    int // 1-based arrival order
	Time   time.Time
	Method string
	Path   string // URL path, e.g. /v1/responses
	Query  string
	Header http.Header
	API    API
	// RawBody is the request body as received (decompressed if gzip-encoded).
	RawBody []byte
	// Body is the decoded JSON body (nil when the body is not JSON).
	Body map[string]any
	// Model and Stream are body.model and body.stream.
	Model  string
	Stream bool
	// NumInput is the number of items in body.input (Responses) or body.messages (Chat).
	NumInput int
	// LastUserText is the text of the last user message (text parts joined with "\n").
	LastUserText string
	// UserTexts are the texts of all user messages, in order.
	UserTexts []string
	// LastItemType is the type of the last input item: for Responses the item type
	// ("message", "function_call_output", "custom_tool_call_output", …); for Chat the role
	// of the last message ("user", "tool", …).
	LastItemType string
	// ToolOutput is the output text when the last input item is a tool result.
	ToolOutput string
	// ToolNames are the names of the tools offered (type for nameless built-in tools).
	ToolNames []string
	// OutputFormat is the structured-output format the client asked for:
	// Responses body.text.format (Codex --output-schema sends
	// {"type":"json_schema","name","schema","strict"}), Chat
	// body.response_format. Nil when the request asked for plain text.
	OutputFormat map[string]any
	// Served is the scenario kind the server answered with.
	Served Kind
	// Ended is how the reply to a model request ended: fakeapi's
	// EndFinished, EndClientGone or EndScenario; "" while it is being written.
	Ended string
}

// OutputSchema returns the JSON Schema of OutputFormat (its "schema", or
// for Chat its "json_schema"."schema"), re-encoded, or nil.
func (r *Request) OutputSchema() []byte {
	f := r.OutputFormat
	if f == nil {
		return nil
	}
	if js, ok := f["json_schema"].(map[string]any); ok {
		f = js
	}
	sch, ok := f["schema"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(sch)
	if err != nil {
		return nil
	}
	return b
}

// Authorization returns the Authorization header.
func (r *Request) Authorization() string { return r.Header.Get("Authorization") }

// BearerToken returns the token of an "Authorization: Bearer …" header, or "".
func (r *Request) BearerToken() string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return a[7:]
	}
	return ""
}

// LastItemIsToolOutput reports whether the request ends with a tool result, i.e. it is the
// follow-up request after a tool call.
func (r *Request) LastItemIsToolOutput() bool {
	switch r.LastItemType {
	case "function_call_output", "custom_tool_call_output", "tool", "function":
		return true
	}
	return false
}

// HasTool reports whether a tool with that name was offered.
func (r *Request) HasTool(name string) bool {
	for _, n := range r.ToolNames {
		if n == name {
			return true
		}
	}
	return false
}

// Server is a running fake. Create it with New or Start.
type Server struct {
	cfg   Config
	base  string
	life  fakeapi.Lifecycle
	queue fakeapi.Queue[Scenario]
	log   fakeapi.Log[Request]

	mu       sync.Mutex
	choose   func(*Request) Scenario
	idSerial int
}

// New starts a fake on 127.0.0.1 with a free port.
func New(cfg Config) (*Server, error) {
	if cfg.Text == "" {
		cfg.Text = DefaultText
	}
	if cfg.Reasoning == "" {
		cfg.Reasoning = DefaultReasoning
	}
	if cfg.Usage == nil {
		u := DefaultUsage
		cfg.Usage = &u
	}
	if cfg.Command == "" {
		cfg.Command = DefaultCommand
	}
	if cfg.Patch == "" {
		cfg.Patch = DefaultPatch
	}
	if cfg.DeltaDelay <= 0 {
		cfg.DeltaDelay = 200 * time.Millisecond
	}
	if cfg.SlowChunks <= 0 {
		cfg.SlowChunks = 30
	}
	if cfg.Model == "" {
		cfg.Model = "gpt-fake"
	}
	s := &Server{cfg: cfg, choose: cfg.Choose}
	base, err := s.life.Serve(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, err
	}
	s.base = base
	return s, nil
}

// TB is the part of testing.TB that Start uses.
type TB = fakeapi.TB

// Start is New for tests: it fails the test on error and closes the server at cleanup.
func Start(t TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	return fakeapi.Started(t, "fakeapi/openai", s, err)
}

// URL is the base URL to configure in a client, ending in /v1 (http://127.0.0.1:PORT/v1).
func (s *Server) URL() string { return s.base + "/v1" }

// Root is the server's root URL without /v1 (http://127.0.0.1:PORT).
func (s *Server) Root() string { return s.base }

// Close stops the server: it unblocks hung and slow handlers, closes every connection
// and waits for the handlers to return. It is safe to call more than once.
func (s *Server) Close() { s.life.Close() }

// Enqueue appends scenarios to the queue; each request takes the next one before any
// chooser or marker is consulted.
func (s *Server) Enqueue(sc ...Scenario) { s.queue.Push(sc...) }

// SetChooser replaces Config.Choose.
func (s *Server) SetChooser(fn func(*Request) Scenario) {
	s.mu.Lock()
	s.choose = fn
	s.mu.Unlock()
}

// Requests returns copies of the recorded requests, in arrival order. Header, Body and
// RawBody are shared with the server's record: do not modify them.
func (s *Server) Requests() []Request { return s.log.All() }

// Count is the number of requests received so far.
func (s *Server) Count() int {
	n, _ := s.log.Len()
	return n
}

// Reset forgets the recorded requests (Seq starts again at 1) and the queue.
func (s *Server) Reset() {
	s.log.Clear()
	s.queue.Clear()
}

// WaitForRequests waits until at least n requests have arrived or the timeout passes,
// and reports whether they did.
func (s *Server) WaitForRequests(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		got, ch := s.log.Len()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-s.life.Done():
			return false
		}
	}
}

// RefusedURL returns a base URL (ending in /v1) on 127.0.0.1 where nothing listens, so
// that connecting to it is refused (fakeapi.RefusedURL).
func RefusedURL() (string, error) {
	u, err := fakeapi.RefusedURL()
	if err != nil {
		return "", err
	}
	return u + "/v1", nil
}

func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	s.idSerial++
	n := s.idSerial
	s.mu.Unlock()
	return fmt.Sprintf("%s_fake%06d", prefix, n)
}

// sleep waits d inside a handler. If the client or the server goes away first it aborts
// the handler (the client sees a broken stream, not a clean end).
func (s *Server) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 || s.life.Wait(r.Context(), d) {
		return true
	}
	panic(http.ErrAbortHandler)
}

// hang holds the reply until the client or the server goes away, then
// aborts the handler: the client sees no end.
func (s *Server) hang(r *http.Request) {
	s.life.Block(r.Context())
	panic(http.ErrAbortHandler)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.life.Enter() {
		panic(http.ErrAbortHandler)
	}
	defer s.life.Leave()

	req := s.record(r)
	switch req.API {
	case APIOther:
		s.serveOther(w, r, req)
		return
	}
	sc := s.pick(req)
	s.log.Update(func() { req.Served = sc.Kind })
	if s.cfg.Logf != nil {
		s.cfg.Logf("fakeapi/openai: #%d %s %s n=%d last_user=%q -> %s", req.Seq, r.Method, r.URL.Path, req.NumInput, truncate(req.LastUserText, 60), sc.Kind)
	}
	if s.serveCommon(w, r, req, sc) {
		return
	}
	// How the reply ended is recorded also when the handler aborts.
	finished := false
	defer func() {
		how := fakeapi.EndOf(finished, r.Context())
		s.log.Update(func() { req.Ended = how })
	}()
	if req.API == APIResponses {
		finished = s.serveResponses(w, r, req, sc)
	} else {
		finished = s.serveChat(w, r, req, sc)
	}
}

// record reads the body and stores the request; the returned pointer is the stored
// record (fields other than Served and Ended are not changed after this).
func (s *Server) record(r *http.Request) *Request {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
			if d, err := io.ReadAll(zr); err == nil {
				raw = d
			}
		}
	}
	req := Request{
		Time:    time.Now(),
		Method:  r.Method,
		Path:    r.URL.Path,
		Query:   r.URL.RawQuery,
		Header:  r.Header.Clone(),
		RawBody: raw,
		API:     APIOther,
	}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
		req.API = APIResponses
	} else if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions") {
		req.API = APIChat
	}
	var body map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &body) == nil {
		req.Body = body
		req.Model, _ = body["model"].(string)
		req.Stream, _ = body["stream"].(bool)
		switch req.API {
		case APIResponses:
			parseResponsesInput(&req, body)
		case APIChat:
			parseChatInput(&req, body)
		}
	}
	s.log.Add(&req, &req.Seq)
	return &req
}

func (s *Server) pick(req *Request) Scenario {
	if sc, ok := s.queue.Pop(); ok {
		return s.fill(sc)
	}
	s.mu.Lock()
	choose := s.choose
	s.mu.Unlock()
	if choose != nil {
		if sc := choose(req); sc.Kind != "" {
			return s.fill(sc)
		}
	}
	return s.fill(DefaultChoice(req))
}

// DefaultChoice is the built-in choice: after a tool result, a text reply that quotes the
// tool output ("Tool output was: …"); otherwise the scenario of the first marker found in
// the last user text (see Markers); otherwise a text reply.
func DefaultChoice(req *Request) Scenario {
	if req.LastItemIsToolOutput() {
		return Text(ToolFollowUpText(req.ToolOutput))
	}
	if sc, ok := ScenarioForText(req.LastUserText); ok {
		return sc
	}
	return Scenario{Kind: KindText}
}

// ToolFollowUpText is the reply DefaultChoice gives after a tool result:
// "Tool output was: " + the output with newlines shown as " | " (cut to 300 bytes).
func ToolFollowUpText(output string) string {
	o := strings.TrimSpace(output)
	o = strings.ReplaceAll(o, "\r\n", "\n")
	o = strings.ReplaceAll(o, "\n", " | ")
	return "Tool output was: " + truncate(o, 300)
}

// fill replaces the scenario's empty fields with the server defaults.
func (s *Server) fill(sc Scenario) Scenario {
	if sc.Kind == "" {
		sc.Kind = KindText
	}
	if sc.Text == "" {
		sc.Text = s.cfg.Text
	}
	if sc.Reasoning == "" {
		sc.Reasoning = s.cfg.Reasoning
	}
	if sc.Usage == nil {
		u := *s.cfg.Usage
		sc.Usage = &u
	}
	if sc.Command == "" {
		sc.Command = s.cfg.Command
	}
	if sc.Patch == "" {
		sc.Patch = s.cfg.Patch
	}
	if sc.Delay <= 0 {
		sc.Delay = s.cfg.DeltaDelay
	}
	if sc.Chunks <= 0 {
		sc.Chunks = s.cfg.SlowChunks
	}
	return sc
}

// serveCommon answers the scenarios that are the same for both APIs and reports whether
// it did.
func (s *Server) serveCommon(w http.ResponseWriter, r *http.Request, req *Request, sc Scenario) bool {
	switch sc.Kind {
	case KindHTTPError:
		for k, vs := range sc.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if sc.RetryAfter != "" {
			w.Header().Set("Retry-After", sc.RetryAfter)
		}
		body := sc.Body
		ct := "application/json"
		if !strings.HasPrefix(strings.TrimSpace(body), "{") {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("X-Request-Id", s.newID("req"))
		status := sc.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
		return true
	case KindHang:
		s.hang(r)
	case KindDisconnect:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return true
			}
		}
		panic(http.ErrAbortHandler)
	}
	return false
}

func (s *Server) serveOther(w http.ResponseWriter, r *http.Request, req *Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data": []any{map[string]any{
				"id": s.cfg.Model, "object": "model", "created": 1700000000, "owned_by": "fake",
			}},
		})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("fake: no route for %s %s", r.Method, r.URL.Path),
		"type":    "invalid_request_error", "param": nil, "code": "unknown_url",
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// sse writes server-sent events and flushes each one. Writes fail silently once the
// client is gone; callers check ok().
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w)}
	e.flush()
	return e
}

// flush sends what was written; its failure (the client gone) is the
// stream's error, so that a reply whose last events never left is not
// recorded as finished (Request.Ended).
func (e *sse) flush() {
	if e.err == nil {
		if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			e.err = err
		}
	}
}

// event writes "event: name" (omitted when empty) and "data: json".
func (e *sse) event(name string, v any) {
	if e.err != nil {
		return
	}
	var b []byte
	switch d := v.(type) {
	case string:
		b = []byte(d)
	default:
		b, e.err = json.Marshal(v)
		if e.err != nil {
			return
		}
	}
	var buf bytes.Buffer
	if name != "" {
		buf.WriteString("event: " + name + "\n")
	}
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	_, e.err = e.w.Write(buf.Bytes())
	e.flush()
}

func (e *sse) ok() bool { return e.err == nil }

// chunkText splits text into one delta per word, keeping whitespace with the word before
// it, so that joining the deltas gives the text back.
func chunkText(text string) []string {
	if text == "" {
		return []string{""}
	}
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' || text[i] == '\n' {
			out = append(out, text[start:i+1])
			start = i + 1
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
