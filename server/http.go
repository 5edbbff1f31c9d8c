package server

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/server/ui"
	"github.com/outposthq/outpost/turnstore"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Routes lists the API's routes as "METHOD PATH" (ServeMux patterns), for
// tests that hold them against the OpenAPI document. /mcp, the MCP
// endpoint (streamable HTTP), speaks MCP's protocol and is not among them.
func Routes() []string {
	return []string{
		"POST /v1/turns", "GET /v1/turns", "GET /v1/turns/{id}", "GET /v1/turns/{id}/events", "POST /v1/turns/{id}/messages",
		"POST /v1/turns/{id}/cancel", "GET /v1/conversations", "GET /v1/conversations/{id}",
		"GET /v1/conversations/{id}/usage", "DELETE /v1/conversations/{id}", "GET /v1/conversations/{id}/export",
		"GET /v1/conversations/{id}/diff", "POST /v1/conversations/import", "POST /v1/races", "GET /v1/agents",
		"GET /v1/openapi.json", "GET /healthz", "GET /metrics",
		"GET /v1/conversations/{id}/history", "GET /v1/limits", "GET /v1/fleet", "GET /v1/gc", "POST /v1/gc",
	}
}

// uiRoute is the console's pattern: its files are served without
// authentication (they hold no data; every call they make is an API
// request with its own bearer token).
const uiRoute = "GET " + ui.Prefix

// routes are the API's handlers, by ServeMux pattern (Routes).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/turns", s.postTurn)
	mux.HandleFunc("GET /v1/turns", s.listTurns)
	mux.HandleFunc("GET /v1/turns/{id}", s.turnRoute(s.getTurn, s.getRemote))
	mux.HandleFunc("GET /v1/turns/{id}/events", s.turnRoute(s.events, s.eventsRemote))
	mux.HandleFunc("POST /v1/turns/{id}/messages", s.turnRoute(s.steerTurn, s.steerRemote))
	mux.HandleFunc("POST /v1/turns/{id}/cancel", s.turnRoute(s.cancelTurn, s.cancelRemote))
	mux.HandleFunc("GET /v1/conversations", s.listConversations)
	mux.HandleFunc("GET /v1/conversations/{id}", s.conversationRoute(s.getConversation))
	mux.HandleFunc("GET /v1/conversations/{id}/usage", s.conversationRoute(s.conversationUsage))
	mux.HandleFunc("DELETE /v1/conversations/{id}", s.conversationRoute(s.deleteConversation))
	mux.HandleFunc("GET /v1/conversations/{id}/export", s.conversationRoute(s.exportConversation))
	mux.HandleFunc("GET /v1/conversations/{id}/diff", s.conversationRoute(s.getDiff))
	mux.HandleFunc("POST /v1/conversations/import", s.importConversation)
	mux.HandleFunc("POST /v1/races", s.postRace)
	mux.HandleFunc("GET /v1/agents", s.agents)
	mux.HandleFunc("GET /v1/conversations/{id}/history", s.conversationRoute(s.history))
	mux.HandleFunc("GET /v1/limits", s.tokenLimits)
	mux.HandleFunc("GET /v1/fleet", s.fleetStatus)
	mux.HandleFunc("GET /v1/gc", s.getGC)
	mux.HandleFunc("POST /v1/gc", s.postGC)
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	})
	mux.HandleFunc("GET /healthz", s.health)
	mux.Handle("/mcp", s.mcpHandler()) // MCP's own protocol, not in the OpenAPI document (docs/mcp.md)
	mux.Handle("GET /metrics", s.metrics.handler())
	if !s.o.DisableUI {
		mux.Handle(uiRoute, ui.Handler()) // the console: static files, no authority (docs/console.md)
	}
	return s.middleware(mux)
}

// turnRoute is the handler of a turn's route: the turn is looked up
// first (404 when unknown); in a fleet, a turn this replica does not hold
// is read from the turn store and handled by remote.
func (s *Server) turnRoute(h func(http.ResponseWriter, *http.Request, *turn), remote func(http.ResponseWriter, *http.Request, turnstore.Turn)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		t, err := s.lookup(id, principalOf(r.Context()))
		if err != nil && s.fleet != nil && validTurnID(id) {
			rec, err := s.remoteTurn(r, id)
			if err != nil {
				writeErr(w, err)
				return
			}
			remote(w, r, rec)
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		h(w, r, t)
	}
}

// conversationRoute is the handler of a conversation's route: the
// reference is resolved first (400, 404).
func (s *Server) conversationRoute(h func(http.ResponseWriter, *http.Request, string, conversation.Meta)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, m, err := s.resolve(r.Context(), r.PathValue("id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		h(w, r, id, m)
	}
}

// statusWriter records the status for logs and metrics, and passes
// flushing through (SSE).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var methods = []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch}

// middleware: panics become 500s, paths are checked, the peer is
// authenticated, unknown routes get the JSON error shape, and every
// request is logged and counted.
func (s *Server) middleware(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		route := "unmatched"
		peer := ""
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error(s.o.Name+": panic", "route", route, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if w.status == 0 {
					fail(outpost.Process, ReasonInternal, "internal error").write(w)
				}
			}
			st := w.status
			if st == 0 {
				st = http.StatusOK
			}
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(st)).Inc()
			s.log.Info("outpost http", "method", r.Method, "route", route, "status", st, "ms", time.Since(start).Milliseconds(), "peer", peer)
		}()
		reject := func(e *apiError) {
			s.metrics.rejected.WithLabelValues(e.err.Details["reason"].(string)).Inc()
			e.write(w)
		}
		if p := r.URL.Path; strings.Contains(p, "//") || slices.ContainsFunc(strings.Split(p, "/"), func(seg string) bool { return seg == ".." || seg == "." }) {
			reject(fail(outpost.Configuration, ReasonBadRequest, "the path is not clean"))
			return
		}
		_, pattern := mux.Handler(r)
		if pattern == "" {
			for _, m := range methods {
				r2 := r.Clone(r.Context())
				r2.Method = m
				if _, p := mux.Handler(r2); p != "" {
					w.Header().Set("Allow", m)
					reject(fail(outpost.Configuration, ReasonMethod, fmt.Sprintf("method %s is not allowed here", r.Method)))
					return
				}
			}
			reject(fail(outpost.Configuration, ReasonNotFound, "no such route"))
			return
		}
		route = pattern
		if pattern != "GET /healthz" && pattern != uiRoute {
			p, e := s.authenticate(r)
			if e != nil {
				if e.status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", bearerChallenge(e.err.Msg))
				}
				// Not a byte more of a refused request's body is read:
				// the connection closes after the answer.
				w.Header().Set("Connection", "close")
				reject(e)
				refuseConn(r.Context())
				return
			}
			markAuthenticated(r.Context())
			peer = p.owner
			r = withPrincipal(r, p)
		}
		mux.ServeHTTP(w, r)
	})
}

// authenticate checks the peer: its uid on a Unix socket, its bearer token
// on TCP (when the server has tokens). The server's own uid, and any
// caller of a server without tokens, is the operator; another allowed uid
// and a token not marked operator are clients, under the policy.
func (s *Server) authenticate(r *http.Request) (principal, *apiError) {
	ci := connOf(r.Context())
	if ci.unix {
		if !ci.uidOK || !slices.Contains(s.o.AllowUIDs, ci.uid) {
			return principal{}, fail(outpost.Refused, ReasonForbidden, "this socket serves only its owner")
		}
		p := principal{owner: "uid:" + strconv.Itoa(ci.uid)}
		if ci.uid == os.Geteuid() {
			p.operator = true
		} else {
			p.policy = &s.o.Policy
		}
		return p, nil
	}
	if s.o.Tokens == nil {
		return operatorPrincipal, nil
	}
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return principal{}, fail(outpost.Refused, ReasonUnauthorized, "a bearer token is required: "+tokenHint)
	}
	e, ok := s.o.Tokens.lookup(strings.TrimSpace(token))
	if !ok {
		return principal{}, fail(outpost.Refused, ReasonUnauthorized, "the token is not valid: "+tokenHint)
	}
	p := principal{owner: "token:" + e.name, token: e.name, operator: e.operator}
	if !e.operator {
		pol := s.o.Policy.over(e.policy)
		p.policy = &pol
	}
	return p, nil
}

// tokenHint says where a token comes from and how to send it: the 401's
// message and its WWW-Authenticate error_description, so that a client
// (the MCP inspector, which would otherwise start an OAuth flow) shows the
// fix. outpost does no OAuth.
const tokenHint = "make one with outpost serve token add NAME on the server's host, and send it as the header Authorization: Bearer TOKEN"

// bearerChallenge is the WWW-Authenticate of a 401 (RFC 6750, section 3):
// the error invalid_token and msg as its description, without the
// characters a quoted description may not hold.
func bearerChallenge(msg string) string {
	desc := strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, msg)
	return `Bearer realm="outpost", error="invalid_token", error_description="` + desc + `"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := encodeLine(v)
	if err != nil {
		http.Error(w, `{"error":{"code":"process","message":"encoding the response"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, err error) { fromError(err).write(w) }

// readJSON decodes exactly one JSON object of at most max bytes into v,
// refusing unknown fields.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.o.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.metrics.rejected.WithLabelValues(ReasonTooLarge).Inc()
			return fail(outpost.Configuration, ReasonTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", s.o.MaxBody))
		}
		msg := err.Error()
		if errors.Is(err, io.EOF) {
			msg = "empty body"
		}
		return fail(outpost.Configuration, ReasonBadRequest, "invalid request body: "+msg)
	}
	return nil
}

func (s *Server) postTurn(w http.ResponseWriter, r *http.Request) {
	var req TurnRequest
	if err := s.readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	t, err := s.admit(trace.ContextWithRemoteSpanContext(r.Context(), callerTrace(r)), &req)
	if err != nil {
		ae := fromError(err)
		if reason, _ := ae.err.Details["reason"].(string); reason == ReasonBusy || reason == ReasonDraining || reason == ReasonTooLarge {
			s.metrics.rejected.WithLabelValues(reason).Inc()
		}
		ae.write(w)
		return
	}
	w.Header().Set("Location", "/v1/turns/"+t.id)
	writeJSON(w, http.StatusAccepted, t.status())
}

// listTurns lists the turns of this replica's that the peer sees (an
// operator: all), newest first: queued and running ones, and finished ones
// still retained. ?limit=N bounds the list (default 100, at most 1000);
// ?state=S keeps the turns in that state.
func (s *Server) listTurns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeErr(w, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("limit %q is not a number from 1 to 1000", v)))
			return
		}
		limit = n
	}
	state := q.Get("state")
	if state != "" && state != StateQueued && state != StateRunning && state != StateFinished {
		writeErr(w, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("state %q is not queued, running or finished", state)))
		return
	}
	p := principalOf(r.Context())
	s.mu.Lock()
	var mine []*turn
	for _, t := range s.turns {
		if p.sees(t.owner) {
			mine = append(mine, t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(mine, func(a, b *turn) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	list := []TurnStatus{}
	for _, t := range mine {
		if st := t.status(); state == "" || st.State == state {
			list = append(list, st)
		}
		if len(list) == limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, TurnList{Turns: list})
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, t *turn) {
	writeJSON(w, http.StatusOK, t.status())
}

// steerText is the message of a steer request, or false once the error
// is written.
func (s *Server) steerText(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req SteerRequest
	if err := s.readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return "", false
	}
	if strings.TrimSpace(req.Text) == "" {
		writeErr(w, fail(outpost.Configuration, ReasonBadRequest, "empty message"))
		return "", false
	}
	return req.Text, true
}

func (s *Server) steerTurn(w http.ResponseWriter, r *http.Request, t *turn) {
	text, ok := s.steerText(w, r)
	if !ok {
		return
	}
	if t.isFinished() {
		writeErr(w, fail(outpost.Refused, ReasonConflict, "the turn is finished: start a new one with resume"))
		return
	}
	select {
	case t.steer <- text:
		writeJSON(w, http.StatusAccepted, SteerResponse{Accepted: true})
	default:
		e := fail(outpost.Refused, ReasonBusy, fmt.Sprintf("%d messages are already waiting for the turn", steerBuffer))
		e.retryAfter = 1
		e.write(w)
	}
}

func (s *Server) cancelTurn(w http.ResponseWriter, r *http.Request, t *turn) {
	if t.isFinished() {
		writeJSON(w, http.StatusOK, t.status())
		return
	}
	t.cancel(errClientCancel)
	writeJSON(w, http.StatusAccepted, t.status())
}

// events streams a turn's events as Server-Sent Events: "id: SEQ" and
// "data: EVENT" per event, the result line last, then the stream ends.
// Last-Event-ID (or ?after=SEQ) resumes after that sequence number.
// Events no longer retained are replaced by one notice of kind
// "truncated" (with the id of the last of them), so a client knows.
func (s *Server) events(w http.ResponseWriter, r *http.Request, t *turn) {
	s.stream(w, r, t, t.agent, nil, func(after int64) (replay, error) { return t.since(after), nil })
}

// startEvents begins a Server-Sent Events response and returns its
// writer, which reports whether the client took b: each write is flushed,
// and a client stuck for 30 s is dropped.
func startEvents(w http.ResponseWriter) (write func(b []byte) bool) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// stream serves an event stream from next (a turn of this replica's, or
// one in the fleet's store); it also looks again at every poll.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, t *turn, agent string, poll <-chan time.Time, next func(after int64) (replay, error)) {
	after, err := lastEventID(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	closeStream, err := s.openStream(t)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer closeStream()
	write := startEvents(w)
	if !write([]byte("retry: 1000\n\n")) {
		return
	}
	ping := time.NewTicker(s.o.Keepalive)
	defer ping.Stop()
	var buf bytes.Buffer
	for {
		rp, err := next(after)
		if err != nil {
			s.log.Warn(s.o.Name+": reading a turn's events", "err", err.Error())
			return // the client resumes with Last-Event-ID
		}
		if rp.missed > 0 || len(rp.entries) > 0 {
			buf.Reset()
			if rp.missed > 0 {
				fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", rp.seq-1, truncated(agent, rp))
			}
			for i, e := range rp.entries {
				fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", rp.seq+int64(i), e)
			}
			if !write(buf.Bytes()) {
				return
			}
			after = rp.seq + int64(len(rp.entries)) - 1
			continue
		}
		if rp.finished {
			return
		}
		select {
		case <-rp.notify:
		case <-poll:
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.base.Done():
			return
		}
	}
}

// lastEventID is the sequence number a stream resumes after:
// Last-Event-ID, else ?after, else 0.
func lastEventID(r *http.Request) (int64, error) {
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("after")
	}
	if from == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(from, 10, 64)
	if err != nil || n < 0 {
		return 0, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("Last-Event-ID %q is not a sequence number", from))
	}
	return n, nil
}

// truncated is the notice that stands for the events a replay misses.
func truncated(agent string, rp replay) []byte {
	b, _ := encodeLine(harness.Event{
		Type: harness.EventNotice, Kind: "truncated", Agent: agent, Time: time.Now().UTC(),
		Text:    fmt.Sprintf("%d earlier events are no longer retained (the server keeps a bounded replay)", rp.missed),
		Details: map[string]any{"dropped_events": rp.missed, "dropped_bytes": rp.dropped, "first_retained": rp.seq},
	})
	return b
}

// openStream counts an event stream against Options.MaxStreams and
// MaxTurnStreams (t nil: a turn of another replica, counted in all only),
// or refuses it (429); the function returned closes it.
func (s *Server) openStream(t *turn) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var own *int
	if t != nil {
		own = &t.streams
	} else {
		own = new(int)
	}
	if s.streams >= s.o.MaxStreams || *own >= s.o.MaxTurnStreams {
		s.metrics.rejected.WithLabelValues(ReasonBusy).Inc()
		e := fail(outpost.Refused, ReasonBusy, fmt.Sprintf("%d event streams open (%d on this turn): the limit", s.streams, *own))
		e.retryAfter = 1
		return nil, e
	}
	s.streams++
	*own++
	s.metrics.streams.Set(float64(s.streams))
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.streams--
		*own--
		s.metrics.streams.Set(float64(s.streams))
	}, nil
}

func (s *Server) store() (conversation.Store, error) {
	if s.o.Store == nil {
		return nil, fail(outpost.Conversation, ReasonNotFound, "this server keeps no conversations")
	}
	return s.o.Store, nil
}

func (s *Server) listConversations(w http.ResponseWriter, r *http.Request) {
	st, err := s.store()
	if err != nil {
		writeErr(w, err)
		return
	}
	if r.URL.Query().Has("limit") || r.URL.Query().Has("after") {
		s.listPage(w, r, st)
		return
	}
	list, err := s.listFor(r.Context(), st)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversations": list})
}

// MaxPage bounds GET /v1/conversations?limit=.
const MaxPage = 1000

// listPage is GET /v1/conversations?limit=N[&after=CURSOR]: one page of
// the conversations the peer may see, and the cursor of the next one; a
// store that reads a page alone (conversation.Pager: PostgreSQL) reads
// only that page.
func (s *Server) listPage(w http.ResponseWriter, r *http.Request, st conversation.Store) {
	q := conversation.PageQuery{Limit: 100, After: r.URL.Query().Get("after")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPage {
			writeErr(w, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("limit %q: want a number from 1 to %d", v, MaxPage)))
			return
		}
		q.Limit = n
	}
	if p := principalOf(r.Context()); !p.operator {
		if p.owner == "" { // sees nothing (principal.sees)
			writeJSON(w, http.StatusOK, map[string]any{"conversations": []conversation.Meta{}})
			return
		}
		q.Owner = &p.owner
	}
	page, next, err := conversation.ListPage(r.Context(), st, q)
	switch {
	case errors.Is(err, conversation.ErrCursor):
		writeErr(w, fail(outpost.Configuration, ReasonBadRequest, "after: not a cursor this server gave (the next of a page)"))
		return
	case err != nil:
		writeErr(w, outpost.Wrap(outpost.Conversation, "list", err))
		return
	}
	body := map[string]any{"conversations": page}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

// listFor lists the conversations the request's peer may see: its own,
// or every one for an operator.
func (s *Server) listFor(ctx context.Context, st conversation.Store) ([]conversation.Meta, error) {
	list, err := st.List(ctx)
	if err != nil {
		return nil, outpost.Wrap(outpost.Conversation, "list", err)
	}
	p := principalOf(ctx)
	out := []conversation.Meta{}
	for _, m := range list {
		if p.sees(m.Owner) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request, id string, m conversation.Meta) {
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) conversationUsage(w http.ResponseWriter, r *http.Request, id string, m conversation.Meta) {
	u := Usage{Conversation: m.ID, Agent: m.Agent, Turns: m.Turns, Usage: m.Usage, Metered: m.Metered, Budget: m.Budget}
	if m.Budget > 0 {
		left := m.Budget
		if m.Metered != nil {
			left = max(left-m.Metered.Tokens(), 0)
		}
		u.BudgetLeft = &left
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request, id string, m conversation.Meta) {
	s.mu.Lock()
	inUse := s.convInUse[id] > 0
	s.mu.Unlock()
	if inUse {
		writeErr(w, fail(outpost.Refused, ReasonConflict, fmt.Sprintf("conversation %s is being continued by a turn", id)))
		return
	}
	var busy *conversation.BusyError
	err := conversation.DeleteUnheld(r.Context(), s.o.Store, id, conversation.Self("outpost serve: DELETE"))
	switch {
	case errors.As(err, &busy):
		e := fail(outpost.Refused, ReasonConflict, fmt.Sprintf("conversation %s is being continued by a turn (%v)", id, busy))
		if !busy.Holder.Since.IsZero() {
			e.err.Detail("holder", map[string]any{"host": busy.Holder.Host, "pid": busy.Holder.PID})
		}
		e.write(w)
	case err != nil:
		writeErr(w, outpost.Wrap(outpost.Conversation, "delete", err))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) agents(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"agents": s.agentList(), "sandboxes": s.sandboxList()})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := Health{Status: "ok", Version: s.o.Version, Running: s.running, Queued: s.queued}
	draining := s.draining
	s.mu.Unlock()
	st := http.StatusOK
	if draining {
		h.Status, st = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, st, h)
}
