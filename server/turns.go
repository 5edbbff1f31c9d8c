package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
)

// steerBuffer is how many messages may wait for a running turn to take
// them.
const steerBuffer = 16

// turn is one turn the server runs, with its retained event log.
type turn struct {
	id      string
	agent   string
	sandbox string
	key     sandbox.PoolKey
	created time.Time
	conv    string // the conversation continued (resume/fork), for DELETE's check
	steer   chan string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed once the result is in the log

	mu       sync.Mutex
	state    string
	started  time.Time
	finished time.Time
	first    int64    // sequence number of log[0]
	log      [][]byte // encoded events, then the result line
	bytes    int
	maxBytes int
	result   *sandbox.ResultLine
	notify   chan struct{} // closed and replaced on every append
}

// since returns the entries after sequence number after, whether the turn
// is finished, a channel closed on the next change, and whether entries
// after `after` were already dropped (gone).
func (t *turn) since(after int64) (entries [][]byte, firstSeq int64, finished bool, notify chan struct{}, gone bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if after < t.first-1 {
		return nil, 0, false, nil, true
	}
	i := after - t.first + 1
	if i < int64(len(t.log)) {
		entries = t.log[i:]
	}
	return entries, after + 1, t.state == StateFinished, t.notify, false
}

func (t *turn) last() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first + int64(len(t.log)) - 1
}

func (t *turn) append(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return
	}
	b := bytes.TrimRight(buf.Bytes(), "\n")
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = append(t.log, b)
	t.bytes += len(b)
	for t.bytes > t.maxBytes && len(t.log) > 1 {
		t.bytes -= len(t.log[0])
		t.log[0] = nil
		t.log = t.log[1:]
		t.first++
	}
	close(t.notify)
	t.notify = make(chan struct{})
}

func (t *turn) status() TurnStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TurnStatus{ID: t.id, State: t.state, Agent: t.agent, Sandbox: t.sandbox, Created: t.created,
		Events: t.first + int64(len(t.log)) - 1, Result: t.result}
	if !t.started.IsZero() {
		ts := t.started
		st.Started = &ts
	}
	if !t.finished.IsZero() {
		ts := t.finished
		st.Finished = &ts
	}
	return st
}

func (t *turn) isFinished() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// admit validates a request and starts its turn, or refuses it.
func (s *Server) admit(ctx context.Context, req *TurnRequest) (*turn, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, fail(outpost.Configuration, ReasonBadRequest, "empty prompt")
	}
	if req.Resume != "" && req.Fork != "" {
		return nil, fail(outpost.Configuration, ReasonBadRequest, "resume and fork are exclusive")
	}
	if len(req.Schema) > s.o.MaxSchema {
		return nil, fail(outpost.Configuration, ReasonTooLarge, fmt.Sprintf("schema of %d bytes is over the limit of %d", len(req.Schema), s.o.MaxSchema))
	}
	if req.TimeoutMS < 0 {
		return nil, fail(outpost.Configuration, ReasonBadRequest, "timeout_ms is negative")
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout > s.o.MaxTimeout || req.TimeoutMS > int64(s.o.MaxTimeout/time.Millisecond) {
		return nil, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("timeout_ms %d is over this server's ceiling of %d", req.TimeoutMS, s.o.MaxTimeout.Milliseconds()))
	}
	if timeout == 0 {
		timeout = s.o.MaxTimeout
	}
	for k := range req.Env {
		if !harness.ValidVariableName(k) {
			return nil, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("invalid variable name %q", k))
		}
	}
	agent := req.Agent
	var conv string
	if ref := req.Resume + req.Fork; ref != "" {
		id, m, err := s.resolve(ctx, ref)
		if err != nil {
			return nil, err
		}
		conv = id
		if agent == "" {
			agent = m.Agent
		}
		if req.Resume != "" {
			req.Resume = id
		} else {
			req.Fork = id
		}
	}
	if agent == "" {
		agent = s.o.DefaultAgent
	}
	h, ok := presets.Lookup(agent)
	if !ok {
		return nil, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("unknown agent %q (known: %s)", agent, strings.Join(presets.Names(), ", ")))
	}
	key, err := s.poolKey(req.Sandbox, req.Settings, false)
	if err != nil {
		return nil, err
	}
	st := sandbox.Turn{
		Agent:      harness.Agent{Kind: "cli", Harness: h, Model: req.Model},
		Prompt:     req.Prompt,
		Workdir:    s.o.Workdir,
		Resume:     req.Resume,
		Fork:       req.Fork,
		Env:        req.Env,
		Timeout:    timeout,
		Inactivity: time.Duration(req.InactivityMS) * time.Millisecond,
		Options:    req.Options,
	}
	if err := req.structured(&st); err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		e := fail(outpost.Refused, ReasonDraining, "the server is shutting down")
		e.retryAfter = 5
		return nil, e
	}
	if s.queued+s.running >= s.o.MaxConcurrent+s.o.MaxQueue {
		e := fail(outpost.Refused, ReasonBusy, fmt.Sprintf("%d turns running and %d queued: the limit", s.running, s.queued))
		e.retryAfter = 1 + s.queued/max(s.o.MaxConcurrent, 1)
		return nil, e
	}
	tctx, cancel := context.WithCancelCause(s.base)
	t := &turn{
		id: newTurnID(), agent: h.Name, sandbox: key.Provider, key: key, created: time.Now().UTC(), conv: conv,
		steer: make(chan string, steerBuffer), ctx: tctx, cancel: cancel, done: make(chan struct{}),
		state: StateQueued, first: 1, maxBytes: s.o.MaxTurnEvents, notify: make(chan struct{}),
	}
	s.turns[t.id] = t
	s.queued++
	s.metrics.queued.Set(float64(s.queued))
	if conv != "" {
		s.convInUse[conv]++
	}
	s.wg.Add(1)
	go s.run(t, st, req.Raw)
	return t, nil
}

// structured checks the structured-answer fields (docs/output.md) and
// sets them on the turn; the engine compiles the schema before any
// sandbox is allocated, so a bad one fails the turn with configuration.
func (r *TurnRequest) structured(t *sandbox.Turn) error {
	if r.Repairs != nil && *r.Repairs < 0 {
		return fail(outpost.Configuration, ReasonBadRequest, "repairs is negative")
	}
	switch r.Protocol {
	case "", "handoff":
	default:
		return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("unknown protocol %q (known: handoff)", r.Protocol))
	}
	if len(r.Schema) > 0 && !json.Valid(r.Schema) {
		return fail(outpost.Configuration, ReasonBadRequest, "schema is not JSON")
	}
	t.Output, t.Repairs, t.Protocol = r.Schema, r.Repairs, r.Protocol
	return nil
}

// resolve turns a conversation reference into an id.
func (s *Server) resolve(ctx context.Context, ref string) (string, conversation.Meta, error) {
	if !validRef(ref) {
		return "", conversation.Meta{}, fail(outpost.Conversation, ReasonBadRequest, fmt.Sprintf("invalid conversation reference %q", ref))
	}
	if s.o.Store == nil {
		return "", conversation.Meta{}, fail(outpost.Conversation, ReasonNotFound, "this server keeps no conversations")
	}
	id, err := conversation.Resolve(ctx, s.o.Store, ref)
	if err != nil {
		return "", conversation.Meta{}, fromError(outpost.Wrap(outpost.Conversation, "locate", err))
	}
	m, err := s.o.Store.Meta(ctx, id)
	if err != nil {
		return "", conversation.Meta{}, fromError(outpost.Wrap(outpost.Conversation, "locate", err))
	}
	return id, m, nil
}

// validRef accepts what a conversation reference can be: an id, an id
// prefix or a native id (letters, digits, '-', '_', '.', not starting
// with '.'), up to 128 bytes. Anything with a '/' or ".." is refused.
func validRef(ref string) bool {
	if ref == "" || len(ref) > 128 || ref[0] == '.' || strings.Contains(ref, "..") {
		return false
	}
	for _, c := range ref {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// run runs an admitted turn: waits for a slot, takes a pooled sandbox,
// runs, records the result.
func (s *Server) run(t *turn, st sandbox.Turn, raw bool) {
	defer s.wg.Done()
	queuedAt := time.Now()
	var res *sandbox.Result
	var err error
	select {
	case s.sem <- struct{}{}:
		s.mu.Lock()
		s.queued--
		s.running++
		s.metrics.queued.Set(float64(s.queued))
		s.metrics.running.Set(float64(s.running))
		s.mu.Unlock()
		s.metrics.wait.Observe(time.Since(queuedAt).Seconds())
		t.mu.Lock()
		t.state, t.started = StateRunning, time.Now().UTC()
		t.mu.Unlock()
		res, err = s.execute(t, st, raw)
		<-s.sem
		s.mu.Lock()
		s.running--
		s.metrics.running.Set(float64(s.running))
		s.mu.Unlock()
	case <-t.ctx.Done():
		s.mu.Lock()
		s.queued--
		s.metrics.queued.Set(float64(s.queued))
		s.mu.Unlock()
		res = &sandbox.Result{Agent: t.agent, Sandbox: t.sandbox}
		err = outpost.New(outpost.Cancelled, "queue", "cancelled before it started")
	}
	if err != nil && outpost.CodeOf(err) == outpost.Cancelled {
		var oe *outpost.Error
		if errors.As(err, &oe) {
			by := "client"
			if errors.Is(context.Cause(t.ctx), errShutdown) {
				by = "shutdown"
			}
			oe.Detail("cancelled_by", by)
		}
	}
	s.finish(t, res, err)
}

// execute runs the turn on a pooled sandbox (or one of its own without a
// pool).
func (s *Server) execute(t *turn, st sandbox.Turn, raw bool) (*sandbox.Result, error) {
	opts := &sandbox.RunOptions{
		Store:     s.o.Store,
		OnEvent:   func(ev harness.Event) { t.append(ev) },
		Steer:     t.steer,
		Environ:   s.o.Environ,
		Installer: s.o.Installer,
		Raw:       raw,
		Logger:    s.log,
	}
	if s.o.PoolSize < 0 {
		p, err := s.pool.Provider(t.key)
		if err != nil {
			return &sandbox.Result{Agent: t.agent, Sandbox: t.sandbox}, err
		}
		opts.Provider = p
		return sandbox.Run(t.ctx, st, opts)
	}
	lease, err := s.pool.Get(t.ctx, t.key)
	if err != nil {
		return &sandbox.Result{Agent: t.agent, Sandbox: t.sandbox}, err
	}
	defer s.pool.Release(t.key, lease)
	opts.Lease = lease
	return sandbox.Run(t.ctx, st, opts)
}

// finish records a turn's result and schedules its removal.
func (s *Server) finish(t *turn, res *sandbox.Result, err error) {
	if res == nil {
		res = &sandbox.Result{Agent: t.agent, Sandbox: t.sandbox}
	}
	line := sandbox.NewResultLine(res, err)
	code := "ok"
	if err != nil {
		code = string(outpost.CodeOf(err))
	}
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started.IsZero() {
		s.metrics.duration.WithLabelValues(t.agent, t.sandbox).Observe(time.Since(started).Seconds())
	}
	s.metrics.turns.WithLabelValues(t.agent, t.sandbox, code).Inc()
	for kind, n := range map[string]int64{"input": res.Usage.InputTokens, "output": res.Usage.OutputTokens, "cache_read": res.Usage.CacheReadTokens, "cache_write": res.Usage.CacheWriteTokens} {
		if n > 0 {
			s.metrics.tokens.WithLabelValues(t.agent, kind).Add(float64(n))
		}
	}
	attrs := []any{"turn", t.id, "agent", t.agent, "sandbox", t.sandbox, "code", code, "conversation", res.Conversation}
	if !started.IsZero() {
		attrs = append(attrs, "ms", time.Since(started).Milliseconds())
	}
	if err != nil {
		attrs = append(attrs, "err", err.Error()) // redacted by the engine
	}
	s.log.Info("outpost turn", attrs...)

	t.append(line)
	t.mu.Lock()
	t.state, t.finished, t.result = StateFinished, time.Now().UTC(), &line
	close(t.notify)
	t.notify = make(chan struct{})
	t.mu.Unlock()
	close(t.done)
	t.cancel(nil)

	s.mu.Lock()
	if t.conv != "" {
		if s.convInUse[t.conv]--; s.convInUse[t.conv] <= 0 {
			delete(s.convInUse, t.conv)
		}
	}
	s.finished = append(s.finished, t)
	for len(s.finished) > s.o.MaxFinished {
		delete(s.turns, s.finished[0].id)
		s.finished = s.finished[1:]
	}
	s.mu.Unlock()
	time.AfterFunc(s.o.Retention, func() { s.forget(t) })
}

func (s *Server) forget(t *turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turns[t.id] == t {
		delete(s.turns, t.id)
	}
	for i, f := range s.finished {
		if f == t {
			s.finished = append(s.finished[:i], s.finished[i+1:]...)
			break
		}
	}
}

func (s *Server) lookup(id string) (*turn, error) {
	if !validTurnID(id) {
		return nil, fail(outpost.Configuration, ReasonNotFound, fmt.Sprintf("no turn %q", id))
	}
	s.mu.Lock()
	t := s.turns[id]
	s.mu.Unlock()
	if t == nil {
		return nil, fail(outpost.Configuration, ReasonNotFound, fmt.Sprintf("no turn %s (unknown, or finished more than the retention ago)", id))
	}
	return t, nil
}
