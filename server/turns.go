package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/gateway/meter"
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
	// the credential gateway's modes (engine.RunOptions)
	secrets, egress string
	egressAllow     []string
	owner           string           // the peer that started it (principal.owner)
	replica         string           // Options.Replica in a fleet
	gatewayOnly     bool             // the client policy allows no secrets in the sandbox
	ws              workspaceOptions // checkpoints and the check (workspace.go)
	steer           chan string
	ctx             context.Context
	cancel          context.CancelCauseFunc
	done            chan struct{} // closed once the result is in the log
	stored          chan error    // the outcome of writing the record to the turn store (a fleet)
	admitted        chan struct{} // closed once the record's outcome is known: only then may it run (a fleet)

	limits []meter.Limiter   // the peer's token budgets (budget.go)
	trace  trace.SpanContext // the caller's trace, continued
	prompt string            // redacted (console.go)
	// the turn's and the conversation's token budgets (RunOptions)
	maxTokens, budget int64

	mu       sync.Mutex
	state    string
	started  time.Time
	finished time.Time
	first    int64    // sequence number of log[0]
	log      [][]byte // encoded events, then the result line
	bytes    int64
	maxBytes int64
	dropped  int64         // bytes of events dropped from the log so far
	total    *atomic.Int64 // the server's retained bytes, all turns
	result   *engine.ResultLine
	notify   chan struct{}  // closed and replaced on every append
	model    string         // asked for, or named by the session event
	usage    *harness.Usage // the last usage event's

	streams int // open event streams (Server.mu)
}

// replay is what a turn's log holds after a sequence number.
type replay struct {
	entries  [][]byte
	seq      int64 // sequence number of entries[0]
	finished bool
	notify   <-chan struct{} // closed (or sent on) on the next change
	// missed is how many events after the one asked for are no longer
	// retained (the log's oldest were dropped); dropped is how many bytes
	// of the turn's events were dropped in all.
	missed, dropped int64
}

// since returns the entries after sequence number after.
func (t *turn) since(after int64) replay {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := replay{finished: t.state == StateFinished, notify: t.notify, dropped: t.dropped}
	if after < t.first-1 {
		r.missed, after = t.first-1-after, t.first-1
	}
	if i := after - t.first + 1; i < int64(len(t.log)) {
		r.entries = t.log[i:]
	}
	r.seq = after + 1
	return r
}

func (t *turn) last() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first + int64(len(t.log)) - 1
}

// append adds an event (or the result line) to the log, dropping the
// oldest entries beyond the turn's bound, and returns its sequence number
// and encoding (nil when it cannot be encoded).
func (t *turn) append(v any) (int64, []byte) {
	b, err := encodeLine(v)
	if err != nil {
		return 0, nil
	}
	return t.appendLine(b), b
}

// appendLine adds an encoded line to the log and wakes the streams,
// returning its sequence number.
func (t *turn) appendLine(b []byte) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = append(t.log, b)
	seq := t.first + int64(len(t.log)) - 1
	t.grow(int64(len(b)))
	for t.bytes > t.maxBytes && len(t.log) > 1 {
		t.drop(1)
	}
	t.changed()
	return seq
}

// nextSeq is the sequence number the next appended line gets.
func (t *turn) nextSeq() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first + int64(len(t.log))
}

// drop removes the log's n oldest entries. Call with t.mu.
func (t *turn) drop(n int) {
	for _, e := range t.log[:n] {
		t.grow(-int64(len(e)))
		t.dropped += int64(len(e))
	}
	clear(t.log[:n])
	t.log = t.log[n:]
	t.first += int64(n)
}

func (t *turn) grow(n int64) {
	t.bytes += n
	if t.total != nil {
		t.total.Add(n)
	}
}

// changed wakes the turn's streams. Call with t.mu.
func (t *turn) changed() {
	close(t.notify)
	t.notify = make(chan struct{})
}

// release drops the whole log of a turn the server forgets.
func (t *turn) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drop(len(t.log))
	t.changed()
}

// encodeLine is v as one JSON line without its newline, HTML characters
// kept as they are.
func encodeLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func (t *turn) status() TurnStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TurnStatus{ID: t.id, State: t.state, Agent: t.agent, Sandbox: t.sandbox, Created: t.created,
		Events: t.first + int64(len(t.log)) - 1, Result: t.result, Replica: t.replica, Model: t.model, Prompt: t.prompt}
	if t.usage != nil {
		u := *t.usage
		st.Usage = &u
	}
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

// note keeps what a running turn's status reports of ev: the agent's
// tokens so far (a usage event's, the engine's running count) and the
// model its session event names.
func (t *turn) note(ev harness.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case harness.EventUsage, harness.EventFinished:
		if ev.Usage != nil {
			u := *ev.Usage
			t.usage = &u
		}
	case harness.EventSession:
		if m, ok := ev.Details["model"].(string); ok && m != "" && t.model == "" {
			t.model = m
		}
	}
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
	timeout, err := s.checkRequest(req)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckModes(req.Secrets, req.Egress, req.EgressAllow); err != nil {
		return nil, fail(outpost.Configuration, ReasonBadRequest, err.Error())
	}
	if req.Egress, err = s.checkPolicy(principalOf(ctx), request{req.Secrets, req.Egress, req.EgressAllow, req.Env}); err != nil {
		return nil, err
	}
	st, key, conv, err := s.plan(ctx, req, timeout)
	if err != nil {
		return nil, err
	}
	t, err := s.enqueue(ctx, st, key, conv, req)
	if err != nil || t.stored == nil {
		return t, err
	}
	// A fleet's replicas must all see the turn once the client has its id;
	// a turn whose record could not be written never runs: its client is
	// told to retry, and a retry must not make it run twice.
	err = <-t.stored
	if err != nil {
		t.cancel(errClientCancel)
	}
	close(t.admitted)
	if err != nil {
		return nil, storeError(err)
	}
	return t, nil
}

// checkRequest refuses what is wrong in the request itself, and returns
// the turn's timeout.
func (s *Server) checkRequest(req *TurnRequest) (time.Duration, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return 0, fail(outpost.Configuration, ReasonBadRequest, "empty prompt")
	}
	if req.Resume != "" && req.Fork != "" {
		return 0, fail(outpost.Configuration, ReasonBadRequest, "resume and fork are exclusive")
	}
	if len(req.Schema) > s.o.MaxSchema {
		return 0, fail(outpost.Configuration, ReasonTooLarge, fmt.Sprintf("schema of %d bytes is over the limit of %d", len(req.Schema), s.o.MaxSchema))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"timeout_ms", req.TimeoutMS}, {"inactivity_ms", req.InactivityMS}, {"max_tokens", req.MaxTokens}, {"budget", req.Budget}} {
		if f.v < 0 {
			// A negative inactivity would turn the watchdog off: a
			// client of a shared server may not.
			return 0, fail(outpost.Configuration, ReasonBadRequest, f.name+" is negative")
		}
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout > s.o.MaxTimeout || req.TimeoutMS > int64(s.o.MaxTimeout/time.Millisecond) {
		return 0, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("timeout_ms %d is over this server's ceiling of %d", req.TimeoutMS, s.o.MaxTimeout.Milliseconds()))
	}
	if timeout == 0 {
		timeout = s.o.MaxTimeout
	}
	for k := range req.Env {
		if !harness.ValidVariableName(k) {
			return 0, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("invalid variable name %q", k))
		}
	}
	if err := s.checkWorkspace(req); err != nil {
		return 0, err
	}
	return timeout, nil
}

// plan resolves the request's conversation, agent and sandbox into the
// engine's turn, refusing (400) what the preset would refuse: its
// options, model or prompt (the engine checks the same, after a 202).
func (s *Server) plan(ctx context.Context, req *TurnRequest, timeout time.Duration) (engine.Turn, sandbox.PoolKey, string, error) {
	agent := req.Agent
	var conv string
	if ref := req.Resume + req.Fork; ref != "" {
		id, at, m, err := s.resolveTurn(ctx, ref)
		if err != nil {
			return engine.Turn{}, sandbox.PoolKey{}, "", err
		}
		conv = id
		if agent == "" {
			agent = m.Agent
		}
		if req.Resume != "" {
			if at > 0 {
				return engine.Turn{}, sandbox.PoolKey{}, "", fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("resume %q: a resume continues the last turn; fork at a turn with fork ID@TURN", req.Resume))
			}
			req.Resume = id
		} else {
			if err := forkable(m, at); err != nil {
				return engine.Turn{}, sandbox.PoolKey{}, "", err
			}
			req.Fork = joinRef(id, at)
		}
	}
	if agent == "" {
		agent = s.o.DefaultAgent
	}
	h, ok := presets.Lookup(agent)
	if !ok {
		return engine.Turn{}, sandbox.PoolKey{}, "", fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("unknown agent %q (known: %s)", agent, strings.Join(presets.Names(), ", ")))
	}
	key, err := s.poolKey(req.Sandbox, req.Settings, false)
	if err != nil {
		return engine.Turn{}, key, "", err
	}
	if key, err = s.egressKey(key, req.Egress, req.EgressAllow); err != nil {
		return engine.Turn{}, key, "", err
	}
	if _, err := h.Request(harness.Input{Prompt: req.Prompt, Model: req.Model, Workdir: s.o.Workdir, Options: req.Options}); err != nil {
		return engine.Turn{}, key, "", fail(outpost.Configuration, ReasonBadRequest, err.Error())
	}
	if err := s.preflight(h, key, req.Env); err != nil {
		return engine.Turn{}, key, "", err
	}
	st := engine.Turn{
		Agent:      harness.Agent{Kind: "cli", Harness: h, Model: req.Model},
		Prompt:     req.Prompt,
		Workdir:    s.o.Workdir,
		Resume:     req.Resume,
		Fork:       req.Fork,
		Env:        req.Env,
		Timeout:    timeout,
		Inactivity: time.Duration(req.InactivityMS) * time.Millisecond,
		Options:    req.Options,
		Workspace:  req.Workspace,
	}
	if err := req.structured(&st); err != nil {
		return engine.Turn{}, key, "", err
	}
	return st, key, conv, nil
}

// preflight refuses (400) a turn whose agent has no credential on the
// sandbox of key, as the engine would before allocating it
// (engine.Preflight): before the turn is queued or takes a pooled sandbox.
func (s *Server) preflight(h *harness.Harness, key sandbox.PoolKey, env map[string]string) error {
	p, err := s.pool.Provider(key)
	if err != nil {
		return fromError(err)
	}
	_, err = engine.Preflight(h, &engine.PreflightOptions{Environ: s.o.Environ, Workdir: s.o.Workdir, Env: env, HostFiles: p.Capabilities().HostFiles})
	if err != nil {
		return fromError(err)
	}
	return nil
}

// enqueue starts an admitted turn, unless the server is draining or full.
// enqueue queues the turn; ctx is the request's: its peer's budgets
// and its caller's trace go with the turn.
func (s *Server) enqueue(ctx context.Context, st engine.Turn, key sandbox.PoolKey, conv string, req *TurnRequest) (*turn, error) {
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
		id: newTurnID(), agent: st.Agent.Harness.Name, sandbox: key.Provider, key: key, created: time.Now().UTC(), conv: conv,
		steer: make(chan string, steerBuffer), ctx: tctx, cancel: cancel, done: make(chan struct{}),
		secrets: req.Secrets, egress: req.Egress, egressAllow: req.EgressAllow, ws: req.workspaceOptions(),
		state: StateQueued, first: 1, maxBytes: int64(s.o.MaxTurnEvents), total: &s.retained, notify: make(chan struct{}),
		limits: s.limitsFor(principalOf(ctx).token), trace: trace.SpanContextFromContext(ctx),
		owner: principalOf(ctx).owner, gatewayOnly: principalOf(ctx).gatewayOnly(),
		model: st.Agent.Model, prompt: s.redactor(req.Env).String(req.Prompt), maxTokens: req.MaxTokens, budget: req.Budget,
	}
	if s.fleet != nil {
		t.replica = s.o.Replica
	}
	s.turns[t.id] = t
	s.queued++
	s.metrics.queued.Set(float64(s.queued))
	if conv != "" {
		s.convInUse[conv]++
	}
	if s.fleet != nil {
		t.stored, t.admitted = s.fleet.create(t), make(chan struct{})
	}
	s.wg.Add(1)
	go s.run(t, st, req.Raw)
	return t, nil
}

// structured checks the structured-answer fields (docs/output.md) and
// sets them on the turn; the engine compiles the schema before any
// sandbox is allocated, so a bad one fails the turn with configuration.
func (r *TurnRequest) structured(t *engine.Turn) error {
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

// resolve turns a conversation reference into an id, among the
// conversations the request's peer may see (principalOf): another
// client's is not found (404), as one that does not exist.
func (s *Server) resolve(ctx context.Context, ref string) (string, conversation.Meta, error) {
	if !validRef(ref) {
		return "", conversation.Meta{}, fail(outpost.Conversation, ReasonBadRequest, fmt.Sprintf("invalid conversation reference %q", ref))
	}
	if s.o.Store == nil {
		return "", conversation.Meta{}, fail(outpost.Conversation, ReasonNotFound, "this server keeps no conversations")
	}
	p := principalOf(ctx)
	id, err := conversation.Resolve(ctx, s.o.Store, ref)
	if errors.Is(err, conversation.ErrAmbiguous) && !p.operator {
		id, err = s.resolveOwn(ctx, p, ref)
	}
	if err != nil {
		return "", conversation.Meta{}, fromError(outpost.Wrap(outpost.Conversation, "locate", err))
	}
	m, err := s.o.Store.Meta(ctx, id)
	if err == nil && !p.sees(m.Owner) {
		err = fmt.Errorf("%w: %q", conversation.ErrNotFound, ref)
	}
	if err != nil {
		return "", conversation.Meta{}, fromError(outpost.Wrap(outpost.Conversation, "locate", err))
	}
	return id, m, nil
}

// resolveOwn resolves a reference that is ambiguous in the store among
// the peer's own conversations only: a client learns nothing of the
// others' from an ambiguity.
func (s *Server) resolveOwn(ctx context.Context, p principal, ref string) (string, error) {
	list, err := s.o.Store.List(ctx)
	if err != nil {
		return "", err
	}
	var match []string
	for _, m := range list {
		if p.sees(m.Owner) && (m.ID == ref || m.Native == ref || (len(ref) >= conversation.MinPrefix && strings.HasPrefix(m.ID, ref))) {
			match = append(match, m.ID)
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("%w: %q", conversation.ErrNotFound, ref)
	case 1:
		return match[0], nil
	}
	return "", fmt.Errorf("%w: %q matches %d conversations", conversation.ErrAmbiguous, ref, len(match))
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
func (s *Server) run(t *turn, st engine.Turn, raw bool) {
	defer s.wg.Done()
	queuedAt := time.Now()
	var res *engine.Result
	var err error
	sem := s.sem
	if t.admitted != nil {
		<-t.admitted
		if t.ctx.Err() != nil {
			sem = nil // refused at its admission: it never runs, whatever select would pick
		}
	}
	select {
	case sem <- struct{}{}:
		s.mu.Lock()
		s.queued--
		s.running++
		s.metrics.queued.Set(float64(s.queued))
		s.metrics.running.Set(float64(s.running))
		s.mu.Unlock()
		s.metrics.wait.Observe(time.Since(queuedAt).Seconds())
		t.mu.Lock()
		t.state, t.started = StateRunning, time.Now().UTC()
		started := t.started
		t.mu.Unlock()
		if s.fleet != nil {
			s.fleet.started(t, started)
		}
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
		res = &engine.Result{Agent: t.agent, Sandbox: t.sandbox}
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
func (s *Server) execute(t *turn, st engine.Turn, raw bool) (*engine.Result, error) {
	opts := &engine.RunOptions{
		Store:     s.o.Store,
		Spool:     s.o.Spool,
		OnEvent:   func(ev harness.Event) { s.record(t, ev) },
		Steer:     t.steer,
		Environ:   s.o.Environ,
		Installer: s.o.Installer,
		Raw:       raw,
		Logger:    s.log,

		Secrets:     t.secrets,
		Egress:      t.egress,
		EgressAllow: t.egressAllow,
		Gateway:     s.gw,
		Limits:      t.limits,
		Owner:       t.owner,
		GatewayOnly: t.gatewayOnly,
		MaxTokens:   t.maxTokens,
		Budget:      t.budget,
	}
	t.ws.apply(opts)
	// A turn in a workspace of its own opens a sandbox there: a pooled
	// one holds the server's working directory.
	if s.o.PoolSize < 0 || st.Workspace != "" {
		p, err := s.pool.Provider(t.key)
		if err != nil {
			return &engine.Result{Agent: t.agent, Sandbox: t.sandbox}, err
		}
		opts.Provider = p
		res, err := engine.Run(t.runContext(), st, opts)
		if st.Workspace != "" {
			s.dropWorkspace(res)
		}
		return res, err
	}
	lease, err := s.pool.Get(t.ctx, t.key)
	if err != nil {
		return &engine.Result{Agent: t.agent, Sandbox: t.sandbox}, err
	}
	defer s.pool.Release(t.key, lease)
	opts.Lease = lease
	return engine.Run(t.runContext(), st, opts)
}

// record adds an event to the turn's log (and the turn store's).
func (s *Server) record(t *turn, ev harness.Event) {
	t.note(ev)
	seq, b := t.append(ev)
	if s.fleet != nil {
		s.fleet.event(t, seq, b)
	}
	s.trimRetained()
}

// finish records a turn's result and schedules its removal.
func (s *Server) finish(t *turn, res *engine.Result, err error) {
	if res == nil {
		res = &engine.Result{Agent: t.agent, Sandbox: t.sandbox}
	}
	line := engine.NewResultLine(res, err)
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
	s.countTurn(t.agent, t.sandbox, code, res)
	attrs := []any{"turn", t.id, "agent", t.agent, "sandbox", t.sandbox, "code", code, "conversation", res.Conversation}
	if !started.IsZero() {
		attrs = append(attrs, "ms", time.Since(started).Milliseconds())
	}
	if err != nil {
		attrs = append(attrs, "err", err.Error()) // redacted by the engine
	}
	s.log.Info("outpost turn", attrs...)

	finished := time.Now().UTC()
	b, _ := encodeLine(line)
	if s.fleet != nil && b != nil {
		// A fleet writes the result to the turn store before any client
		// sees it, so that a client that read it from this replica and
		// then asks another finds the turn finished (the fresh-clone
		// chaos run found a turn still running in the store after its
		// user had the result). A store that does not take the write in
		// resultWait does not hold the result back: the writer keeps it
		// and writes it once the store is back.
		s.fleet.finished(t, t.nextSeq(), b, finished, resultWait)
	}
	if b != nil {
		t.appendLine(b)
	}
	t.mu.Lock()
	t.state, t.finished, t.result = StateFinished, finished, &line
	if res.Model != "" {
		t.model = res.Model
	}
	if res.Usage != (harness.Usage{}) {
		u := res.Usage
		t.usage = &u
	}
	t.changed()
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
		s.forgetLocked(s.finished[0])
	}
	s.mu.Unlock()
	s.trimRetained()
	time.AfterFunc(s.o.Retention, func() { s.forget(t) })
}

// countTurn counts a finished turn and its tokens.
func (s *Server) countTurn(agent, sandboxName, code string, res *engine.Result) {
	s.metrics.turns.WithLabelValues(agent, sandboxName, code).Inc()
	if res == nil {
		return
	}
	for kind, n := range map[string]int64{"input": res.Usage.InputTokens, "output": res.Usage.OutputTokens, "cache_read": res.Usage.CacheReadTokens, "cache_write": res.Usage.CacheWriteTokens} {
		if n > 0 {
			s.metrics.tokens.WithLabelValues(agent, kind).Add(float64(n))
		}
	}
}

// observeTurn counts a turn that ran outside the turn log (a race's
// contestant): its count, tokens and duration.
func (s *Server) observeTurn(agent, sandboxName string, res *engine.Result, err error) {
	code := "ok"
	if err != nil {
		code = string(outpost.CodeOf(err))
	}
	if res != nil && res.DurationMS > 0 {
		s.metrics.duration.WithLabelValues(agent, sandboxName).Observe(float64(res.DurationMS) / 1000)
	}
	s.countTurn(agent, sandboxName, code, res)
}

func (s *Server) forget(t *turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(t)
}

// forgetLocked removes a finished turn and its events. Call with s.mu.
func (s *Server) forgetLocked(t *turn) {
	if s.turns[t.id] == t {
		delete(s.turns, t.id)
	}
	if i := slices.Index(s.finished, t); i >= 0 {
		s.finished = slices.Delete(s.finished, i, i+1)
	}
	t.release()
}

// trimRetained forgets the oldest finished turns while the events of all
// turns are over Options.MaxRetained. (Live turns alone stay under it:
// New bounds MaxTurnEvents by MaxRetained / MaxConcurrent.)
func (s *Server) trimRetained() {
	if s.retained.Load() <= int64(s.o.MaxRetained) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.retained.Load() > int64(s.o.MaxRetained) && len(s.finished) > 0 {
		s.forgetLocked(s.finished[0])
	}
}

// lookup finds a turn of this replica's that p may see: another
// client's is not found (404), as one that does not exist.
func (s *Server) lookup(id string, p principal) (*turn, error) {
	if !validTurnID(id) {
		return nil, fail(outpost.Configuration, ReasonNotFound, fmt.Sprintf("no turn %q", id))
	}
	s.mu.Lock()
	t := s.turns[id]
	s.mu.Unlock()
	if t == nil || !p.sees(t.owner) {
		return nil, fail(outpost.Configuration, ReasonNotFound, fmt.Sprintf("no turn %s (unknown, or finished more than the retention ago)", id))
	}
	return t, nil
}
