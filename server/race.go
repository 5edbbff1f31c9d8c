package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
)

// Races (POST /v1/races, MCP's race tool): engine.Race with the
// server's provider, store and gateway, as a turn runs. A race lives as
// long as the request (or MCP call) that started it, on the replica that
// received it: a client that goes away cancels it. Each contestant takes
// one of the server's turn slots when it starts (it waits in the queue
// meanwhile), so races and turns share --max-concurrent and --max-queue.

// race is one race the server runs.
type race struct {
	id     string
	agents []string // each contestant's
	conv   string   // the conversation From continues, for DELETE's check
	ctx    context.Context
	cancel context.CancelCauseFunc
	begun  chan struct{} // closed once the race started its contestants (its first progress)
	begin  sync.Once
	done   chan struct{} // closed once res or err is set and the queue is final

	res   *engine.RaceResult
	lines []RaceResultLine
	err   error

	// Slots (Server.mu): which contestants hold one, how many still wait
	// for theirs (counted in Server.queued).
	held    []bool
	waiting int

	// The follower's queue: encoded items not yet taken. Events beyond
	// maxBytes pending are dropped (a notice of kind truncated says so
	// before the contestant's next event); progress and results never are.
	keep     bool
	maxBytes int64
	mu       sync.Mutex
	queue    [][]byte
	bytes    int64
	dropped  map[int]int64
	notify   chan struct{}
	finished bool
}

func newRaceID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "r" + hex.EncodeToString(b[:])
}

// push queues an item for the follower; droppable items (events) are
// dropped when the queue is full.
func (r *race) push(v any, contestant int, droppable bool) {
	if !r.keep {
		return
	}
	b, err := encodeLine(v)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if droppable {
		if r.bytes+int64(len(b)) > r.maxBytes {
			r.dropped[contestant]++
			return
		}
		r.flushDropped(contestant)
	}
	r.queue = append(r.queue, b)
	r.bytes += int64(len(b))
	close(r.notify)
	r.notify = make(chan struct{})
}

// flushDropped queues the notice of a contestant's dropped events. Call
// with r.mu.
func (r *race) flushDropped(contestant int) {
	n := r.dropped[contestant]
	if n == 0 {
		return
	}
	delete(r.dropped, contestant)
	b, err := encodeLine(RaceEvent{Contestant: contestant, Event: harness.Event{
		Type: harness.EventNotice, Kind: "truncated", Agent: r.agents[contestant], Time: time.Now().UTC(),
		Text:    fmt.Sprintf("%d events of contestant %d were dropped: the client read the race's stream slower than the agents wrote", n, contestant),
		Details: map[string]any{"dropped_events": n},
	}})
	if err == nil {
		r.queue = append(r.queue, b)
		r.bytes += int64(len(b))
	}
}

// take returns the queued items, whether the race is over (nothing will
// follow them), and a channel closed on the next push.
func (r *race) take() ([][]byte, bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue
	r.queue, r.bytes = nil, 0
	return q, r.finished, r.notify
}

// checkRace refuses what is wrong in a race request and returns the
// race's spec, the sandbox's pool key and the conversation From
// continues.
func (s *Server) checkRace(ctx context.Context, req *RaceRequest) (engine.RaceSpec, sandbox.PoolKey, string, error) {
	bad := func(format string, args ...any) (engine.RaceSpec, sandbox.PoolKey, string, error) {
		return engine.RaceSpec{}, sandbox.PoolKey{}, "", fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return bad("empty prompt")
	}
	count := req.Count
	switch {
	case count < 0:
		return bad("count %d is negative", count)
	case count == 0:
		count = 1
	}
	agents := req.Agents
	if len(agents) == 0 {
		agents = []string{s.o.DefaultAgent}
	}
	if count > MaxRaceContestants || len(agents)*count > MaxRaceContestants {
		return bad("%d agent(s) × count %d: a race has at most %d contestants", len(agents), count, MaxRaceContestants)
	}
	if n := len(agents) * count; n > s.o.MaxConcurrent+s.o.MaxQueue {
		return bad("%d contestants: over what this server runs and queues at once (%d)", n, s.o.MaxConcurrent+s.o.MaxQueue)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"max_tokens", req.MaxTokens}, {"budget", req.Budget}} {
		if f.v < 0 {
			return bad("%s is negative", f.name)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"timeout_ms", req.TimeoutMS}, {"check_timeout_ms", req.CheckTimeoutMS}} {
		if err := s.checkTimeout(f.name, f.v); err != nil {
			return engine.RaceSpec{}, sandbox.PoolKey{}, "", err
		}
	}
	if err := engine.CheckModes(req.Secrets, req.Egress, req.EgressAllow); err != nil {
		return bad("%s", err.Error())
	}
	var err error
	if req.Egress, err = s.checkPolicy(principalOf(ctx), request{req.Secrets, req.Egress, req.EgressAllow, req.Env}); err != nil {
		return engine.RaceSpec{}, sandbox.PoolKey{}, "", err
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout == 0 {
		timeout = s.o.MaxTimeout
	}
	for k := range req.Env {
		if !harness.ValidVariableName(k) {
			return bad("invalid variable name %q", k)
		}
	}
	spec := engine.RaceSpec{Prompt: req.Prompt, Workdir: s.o.Workdir, Check: req.Check, MaxTokens: req.MaxTokens, Budget: req.Budget, Timeout: timeout, Env: req.Env}
	if len(req.Options) > 0 || len(req.AgentOptions) > 0 {
		spec.Options = map[string]map[string]string{"": req.Options}
		for name, o := range req.AgentOptions {
			if !slices.Contains(agents, name) {
				return bad("agent_options names %q, which is not in the race (agents: %s)", name, strings.Join(agents, ", "))
			}
			spec.Options[name] = o
		}
	}
	seen := map[string]bool{}
	for _, name := range agents {
		h, ok := presets.Lookup(name)
		if !ok {
			return bad("unknown agent %q (known: %s)", name, strings.Join(presets.Names(), ", "))
		}
		if !seen[name] {
			seen[name] = true
			// The preset refuses here what it would refuse after the race
			// started: its options, the model, the prompt.
			if _, err := h.Request(harness.Input{Prompt: req.Prompt, Model: req.Model, Workdir: s.o.Workdir, Options: raceOptions(spec.Options, name)}); err != nil {
				return bad("agent %s: %s", name, err.Error())
			}
		}
		for range count {
			spec.Contestants = append(spec.Contestants, harness.Agent{Kind: harness.KindCLI, Harness: h, Model: req.Model})
		}
	}
	if req.Judge != "" {
		h, ok := presets.Lookup(req.Judge)
		if !ok {
			return bad("unknown judge agent %q (known: %s)", req.Judge, strings.Join(presets.Names(), ", "))
		}
		spec.Judge = &harness.Agent{Kind: harness.KindCLI, Harness: h}
	}
	key, err := s.poolKey(req.Sandbox, req.Settings, false)
	if err != nil {
		return engine.RaceSpec{}, key, "", err
	}
	// Every agent of the race, the judge too, has a credential.
	for _, a := range append(slices.Clone(spec.Contestants), judgeOf(spec)...) {
		if err := s.preflight(a.Harness, key, req.Env); err != nil {
			return engine.RaceSpec{}, key, "", err
		}
	}
	if _, ok := s.o.Store.(conversation.ObjectStorer); !ok {
		return engine.RaceSpec{}, key, "", fail(outpost.Configuration, ReasonUnsupported, "a race needs a store that keeps checkpoints; this server's keeps none")
	}
	var conv string
	if req.From != "" {
		id, at, _, err := s.resolveTurn(ctx, req.From)
		if err != nil {
			return engine.RaceSpec{}, key, "", err
		}
		spec.From = joinRef(id, at)
		if _, err := conversation.LocateCheckpoint(ctx, s.o.Store, spec.From); err != nil {
			return engine.RaceSpec{}, key, "", checkpointFail("race", err)
		}
		conv = id
	}
	return spec, key, conv, nil
}

// judgeOf is the race's judge, as a list of none or one.
func judgeOf(spec engine.RaceSpec) []harness.Agent {
	if spec.Judge == nil {
		return nil
	}
	return []harness.Agent{*spec.Judge}
}

// startRace validates a race request and starts the race, or refuses it
// (400, 404, 429, 501, 503). ctx is the request's: its peer's budgets
// and its caller's trace go with the race; the race itself ends with
// the server, or when its caller cancels it (race.cancel). keep: queue
// progress and events for a follower.
func (s *Server) startRace(ctx context.Context, req *RaceRequest, keep bool) (*race, error) {
	spec, key, conv, err := s.checkRace(ctx, req)
	if err != nil {
		return nil, err
	}
	provider, err := s.pool.Provider(key)
	if err != nil {
		return nil, err
	}
	n := len(spec.Contestants)
	rctx, cancel := context.WithCancelCause(s.base)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rctx = trace.ContextWithRemoteSpanContext(rctx, sc)
	}
	r := &race{id: newRaceID(), conv: conv, ctx: rctx, cancel: cancel, begun: make(chan struct{}), done: make(chan struct{}),
		held: make([]bool, n), waiting: n, keep: keep, maxBytes: int64(s.o.MaxTurnEvents), dropped: map[int]int64{}, notify: make(chan struct{})}
	for _, a := range spec.Contestants {
		r.agents = append(r.agents, a.Harness.Name)
	}
	opts := &engine.RaceOptions{Run: engine.RunOptions{
		Provider: provider, Store: s.o.Store, Spool: s.o.Spool, Environ: s.o.Environ, Installer: s.o.Installer, Logger: s.log,
		Secrets: req.Secrets, Egress: req.Egress, EgressAllow: req.EgressAllow, Gateway: s.gw, Limits: s.limitsFor(principalOf(ctx).token),
		CheckTimeout: time.Duration(req.CheckTimeoutMS) * time.Millisecond,
		Owner:        principalOf(ctx).owner, GatewayOnly: principalOf(ctx).gatewayOnly(),
	}}
	opts.OnProgress = func(p engine.RaceProgress) { s.raceProgress(r, p) }
	opts.OnEvent = func(i int, ev harness.Event) { r.push(RaceEvent{Event: ev, Contestant: i}, i, true) }

	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		cancel(nil)
		e := fail(outpost.Refused, ReasonDraining, "the server is shutting down")
		e.retryAfter = 5
		return nil, e
	}
	if s.queued+s.running+n > s.o.MaxConcurrent+s.o.MaxQueue {
		e := fail(outpost.Refused, ReasonBusy, fmt.Sprintf("%d turns running and %d queued: no room for %d contestants", s.running, s.queued, n))
		e.retryAfter = 1 + s.queued/max(s.o.MaxConcurrent, 1)
		s.mu.Unlock()
		cancel(nil)
		return nil, e
	}
	s.queued += n
	s.metrics.queued.Set(float64(s.queued))
	if conv != "" {
		s.convInUse[conv]++
	}
	if s.races == nil {
		s.races = map[*race]struct{}{}
	}
	s.races[r] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.log.Info("outpost race: started", "race", r.id, "contestants", n, "sandbox", key.Provider)
	go s.runRace(r, spec, opts, key.Provider)
	return r, nil
}

// raceProgress follows a contestant's steps: "started" waits for one of
// the server's turn slots (engine.Race calls it from the contestant's
// goroutine before its sandbox is opened), "checked", its last, gives it
// back.
func (s *Server) raceProgress(r *race, p engine.RaceProgress) {
	i := p.Contestant
	switch p.State {
	case "started":
		r.begin.Do(func() { close(r.begun) })
		queuedAt := time.Now()
		select {
		case s.sem <- struct{}{}:
			s.metrics.wait.Observe(time.Since(queuedAt).Seconds())
			s.mu.Lock()
			s.queued--
			s.running++
			r.waiting--
			r.held[i] = true
			s.metrics.queued.Set(float64(s.queued))
			s.metrics.running.Set(float64(s.running))
			s.mu.Unlock()
		case <-r.ctx.Done():
			s.mu.Lock()
			s.queued--
			r.waiting--
			s.metrics.queued.Set(float64(s.queued))
			s.mu.Unlock()
		}
	case "checked":
		s.mu.Lock()
		held := r.held[i]
		if held {
			r.held[i] = false
			s.running--
			s.metrics.running.Set(float64(s.running))
		}
		s.mu.Unlock()
		if held {
			<-s.sem
		}
	}
	r.push(RaceProgress{Type: "progress", RaceProgress: p}, i, false)
}

// runRace runs a started race to its end: its result lines and race line
// queued last, its contestants counted and logged, the workspaces whose
// checkpoints hold their files removed.
func (s *Server) runRace(r *race, spec engine.RaceSpec, opts *engine.RaceOptions, sandboxName string) {
	defer s.wg.Done()
	res, err := engine.Race(r.ctx, spec, opts)
	s.mu.Lock()
	s.queued -= r.waiting // contestants that never started (a race that failed to start)
	r.waiting = 0
	s.metrics.queued.Set(float64(s.queued))
	delete(s.races, r)
	if r.conv != "" {
		if s.convInUse[r.conv]--; s.convInUse[r.conv] <= 0 {
			delete(s.convInUse, r.conv)
		}
	}
	s.mu.Unlock()
	outcome := "error"
	if err == nil {
		outcome = "no_winner"
		if res.Winner >= 0 {
			outcome = "winner"
		}
		by := "client"
		if errors.Is(context.Cause(r.ctx), errShutdown) {
			by = "shutdown"
		}
		for _, c := range res.Contestants {
			var oe *outpost.Error
			if outpost.CodeOf(c.Err) == outpost.Cancelled && errors.As(c.Err, &oe) {
				oe.Detail("cancelled_by", by)
			}
			line := engine.NewResultLine(c.Result, c.Err)
			if line.Agent == "" {
				line.Agent = c.Agent
			}
			if line.Sandbox == "" {
				line.Sandbox = sandboxName
			}
			r.lines = append(r.lines, RaceResultLine{ResultLine: line, Contestant: c.Index})
			s.observeTurn(line.Agent, sandboxName, c.Result, c.Err)
			attrs := []any{"race", r.id, "contestant", c.Index, "agent", line.Agent, "sandbox", sandboxName, "code", orOK(c.Err), "conversation", c.Conversation, "ms", c.DurationMS, "passed", c.Passed}
			if c.Err != nil {
				attrs = append(attrs, "err", c.Err.Error()) // redacted by the engine
			}
			s.log.Info("outpost turn", attrs...)
			if c.Result != nil && c.Result.Checkpoint != nil {
				s.removeWorkspace(c.Workdir)
			}
		}
		r.mu.Lock()
		for i := range res.Contestants {
			r.flushDropped(i)
		}
		r.mu.Unlock()
		for _, l := range r.lines {
			r.push(l, l.Contestant, false)
		}
		r.push(RaceLine{Type: "race", RaceResult: res}, 0, false)
		s.log.Info("outpost race", "race", r.id, "contestants", len(res.Contestants), "winner", res.Winner, "conversation", res.Conversation, "tokens", res.Tokens, "ms", res.DurationMS)
	} else {
		s.log.Info("outpost race", "race", r.id, "code", string(outpost.CodeOf(err)), "err", err.Error())
	}
	s.metrics.races.WithLabelValues(outcome).Inc()
	r.mu.Lock()
	r.res, r.err = res, err
	r.finished = true
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
	r.cancel(nil)
	close(r.done)
}

// raceOptions are one preset's options in a race: those for every
// contestant, its own over them (engine.RaceSpec.Options).
func raceOptions(all map[string]map[string]string, preset string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{all[""], all[preset]} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func orOK(err error) string {
	if err == nil {
		return "ok"
	}
	return string(outpost.CodeOf(err))
}

// response is a finished race's plain JSON answer.
func (r *race) response() RaceResponse {
	lines := r.lines
	if lines == nil {
		lines = []RaceResultLine{}
	}
	return RaceResponse{Results: lines, Race: RaceLine{Type: "race", RaceResult: r.res}}
}

// wantsEvents: the client asks for a stream (Accept: text/event-stream).
func wantsEvents(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// postRace is POST /v1/races. With Accept: text/event-stream the race's
// progress, its contestants' events, their result lines and the race
// line stream as Server-Sent Events (ids from 1, no replay); otherwise
// the answer waits for the end: RaceResponse. A race that cannot start
// is an error response either way.
func (s *Server) postRace(w http.ResponseWriter, r *http.Request) {
	var req RaceRequest
	if err := s.readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	stream := wantsEvents(r)
	closeStream := func() {}
	if stream {
		c, err := s.openStream(nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		closeStream = c
	}
	defer closeStream()
	rc, err := s.startRace(trace.ContextWithRemoteSpanContext(r.Context(), callerTrace(r)), &req, stream)
	if err != nil {
		ae := fromError(err)
		if reason, _ := ae.err.Details["reason"].(string); reason == ReasonBusy || reason == ReasonDraining {
			s.metrics.rejected.WithLabelValues(reason).Inc()
		}
		ae.write(w)
		return
	}
	// The race lives as long as the request.
	stop := context.AfterFunc(r.Context(), func() { rc.cancel(errClientCancel) })
	defer stop()
	if !stream {
		<-rc.done
		if rc.err != nil {
			writeErr(w, rc.err)
			return
		}
		writeJSON(w, http.StatusOK, rc.response())
		return
	}
	// The stream begins once the race has started its contestants (from
	// then on it cannot fail); a race that could not start is an error
	// response.
	select {
	case <-rc.begun:
	case <-rc.done:
		if rc.err != nil {
			writeErr(w, rc.err)
			return
		}
	}
	s.streamRace(w, r, rc)
}

// streamRace writes a race's queue as Server-Sent Events until its race
// line; a client that stops reading for 30 s is dropped (and the race
// cancelled with the request).
func (s *Server) streamRace(w http.ResponseWriter, r *http.Request, rc *race) {
	write := startEvents(w)
	ping := time.NewTicker(s.o.Keepalive)
	defer ping.Stop()
	var seq int64
	var buf bytes.Buffer
	for {
		items, finished, notify := rc.take()
		if len(items) > 0 {
			buf.Reset()
			for _, it := range items {
				seq++
				fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", seq, it)
			}
			if !write(buf.Bytes()) {
				return
			}
			continue
		}
		if finished {
			return
		}
		select {
		case <-notify:
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
