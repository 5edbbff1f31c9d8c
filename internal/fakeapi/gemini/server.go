// Package gemini is a fake Gemini API (generativelanguage v1beta) for
// tests. It listens on loopback and serves what Gemini CLI calls with an
// API key: POST /v1beta/models/<model>:generateContent (the model router's
// JSON classification, and any non-streaming call),
// :streamGenerateContent?alt=sse (the turn itself, server-sent events)
// and :countTokens, with usageMetadata, function calls and the API's error
// bodies (429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE). Every request is
// recorded; the reply to each is a Scenario taken from a queue, from a
// chooser, or from a marker such as FAKE_TOOL in the last user text.
package gemini

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
)

// Config sets the server's defaults. The zero value is usable.
type Config struct {
	Text  string // default reply (DefaultText)
	Usage *Usage // default usage (DefaultUsage)
	// Choose, when set, picks the scenario of a request the queue did not
	// answer; a zero Scenario falls through to the built-in choice.
	Choose func(*Request) Scenario
}

// DefaultText is the default reply.
const DefaultText = "Hello from the fake Gemini."

// Request is one recorded request.
type Request struct {
	Seq    int
	Time   time.Time
	Method string // HTTP method
	Path   string
	Query  string
	Header http.Header
	// Model and RPC come from the path /v1beta/models/<Model>:<RPC>.
	Model, RPC string
	Stream     bool // RPC is streamGenerateContent
	RawBody    []byte
	Body       map[string]any
	// NumContents is len(body.contents); UserTexts the text of every user
	// content, in order; LastUserText the last of them.
	NumContents  int
	UserTexts    []string
	LastUserText string
	// FunctionResponse is the output of the last content when it is a
	// functionResponse (the follow-up after a tool call), with its name.
	FunctionResponse     string
	FunctionResponseName string
	HasFunctionResponse  bool
	// ToolNames are the function declarations offered.
	ToolNames []string
	// ResponseSchema is generationConfig.responseJsonSchema (or
	// responseSchema), re-encoded; nil when the request asked for none.
	ResponseSchema []byte
	// Served is the scenario the server answered with.
	Served string
	// Ended is how the reply to a generate request ended: fakeapi's
	// EndFinished, EndClientGone or EndScenario; "" while it is being written.
	Ended string
}

// APIKey is the key the request carried: the x-goog-api-key header, or
// the key query parameter.
func (r *Request) APIKey() string {
	if k := r.Header.Get("x-goog-api-key"); k != "" {
		return k
	}
	if i := strings.Index(r.Query, "key="); i >= 0 {
		k := r.Query[i+4:]
		if j := strings.IndexByte(k, '&'); j >= 0 {
			k = k[:j]
		}
		return k
	}
	return ""
}

// Router reports whether the request is the CLI's model-router
// classification (with the default model "auto"): a JSON answer scoring
// the prompt's complexity (complexity_score) or choosing a model
// (model_choice).
func (r *Request) Router() bool {
	if r.Stream || r.RPC != "generateContent" {
		return false
	}
	s := string(r.ResponseSchema)
	return strings.Contains(s, "complexity_score") || strings.Contains(s, "model_choice")
}

// Server is a running fake.
type Server struct {
	cfg   Config
	base  string
	life  fakeapi.Lifecycle
	queue fakeapi.Queue[Scenario]
	log   fakeapi.Log[Request]
}

// New starts a fake on 127.0.0.1 with a free port.
func New(cfg Config) (*Server, error) {
	if cfg.Text == "" {
		cfg.Text = DefaultText
	}
	if cfg.Usage == nil {
		u := DefaultUsage
		cfg.Usage = &u
	}
	s := &Server{cfg: cfg}
	base, err := s.life.Serve(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, err
	}
	s.base = base
	return s, nil
}

// TB is the part of testing.TB that Start uses.
type TB = fakeapi.TB

// Start is New for tests: it fails the test on error and closes the
// server at cleanup.
func Start(t TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	return fakeapi.Started(t, "fakeapi/gemini", s, err)
}

// URL is the base URL to give the CLI (GOOGLE_GEMINI_BASE_URL):
// http://127.0.0.1:PORT, without the API version.
func (s *Server) URL() string { return s.base }

// Close stops the server, unblocking hung handlers. Safe to call twice.
func (s *Server) Close() { s.life.Close() }

// Enqueue appends scenarios; each request that is not the router's takes
// the next one before any chooser or marker is consulted.
func (s *Server) Enqueue(sc ...Scenario) { s.queue.Push(sc...) }

// Requests returns copies of the recorded requests, in arrival order.
func (s *Server) Requests() []Request { return s.log.All() }

// Turns returns the recorded requests that are not the router's.
func (s *Server) Turns() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.RPC != "" && !r.Router() && r.RPC != "countTokens" {
			out = append(out, r)
		}
	}
	return out
}

// Reset forgets the recorded requests and the queue.
func (s *Server) Reset() {
	s.log.Clear()
	s.queue.Clear()
}

func (s *Server) serve(w http.ResponseWriter, hr *http.Request) {
	if !s.life.Enter() {
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	defer s.life.Leave()

	body, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<20))
	r := parseRequest(hr, body)
	s.log.Add(r, &r.Seq)

	switch {
	case hr.Method == http.MethodGet && strings.HasPrefix(r.Path, "/v1beta/models"):
		writeJSON(w, http.StatusOK, map[string]any{"models": []any{map[string]any{"name": "models/gemini-fake"}}})
		s.served(r, "models")
	case hr.Method != http.MethodPost || r.RPC == "":
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": 404, "message": "fake: unknown path " + r.Path, "status": "NOT_FOUND"}})
		s.served(r, "not_found")
	case r.RPC == "countTokens":
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": s.cfg.Usage.Prompt})
		s.served(r, "count_tokens")
	default:
		sc := Scenario{Kind: KindRouter}
		if !r.Router() {
			sc = s.pick(r)
		}
		// Recorded also when the handler aborts (a dropped reply).
		finished := false
		defer func() { s.ended(r, finished, hr) }()
		finished = s.reply(w, r, sc)
	}
}

// ended records how the reply to a generate request ended.
func (s *Server) ended(r *Request, finished bool, hr *http.Request) {
	how := fakeapi.EndOf(finished, hr.Context())
	s.log.Update(func() { r.Ended = how })
}

func (s *Server) served(r *Request, name string) {
	s.log.Update(func() { r.Served = name })
}

// pick chooses the reply to a request: the queue, the chooser, a tool
// follow-up, a marker, the default text.
func (s *Server) pick(r *Request) Scenario {
	if sc, ok := s.queue.Pop(); ok {
		return sc
	}
	if s.cfg.Choose != nil {
		if sc := s.cfg.Choose(r); sc.Kind != "" {
			return sc
		}
	}
	if r.HasFunctionResponse {
		return Text("Tool output was: " + strings.TrimSpace(r.FunctionResponse))
	}
	for _, m := range []string{"FAKE_QUOTA", "FAKE_429", "FAKE_503", "FAKE_TOOL", "FAKE_ECHO", "FAKE_HANG", "FAKE_DROP"} {
		if strings.Contains(r.LastUserText, m) {
			return Markers[m]
		}
	}
	return Text("")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
