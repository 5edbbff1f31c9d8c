package server

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/turnstore"
)

// The routes the web console reads beside the turns and conversations
// (docs/console.md): the token-limit windows, the fleet's replicas,
// garbage collection, and a conversation's exchange. The fleet and
// garbage collection are an operator's: a client token gets 403.

// LimitWindow is one window of a token's limit: its limit, the tokens
// used in the current UTC hour or day, what is left, and when it resets.
type LimitWindow struct {
	Limit  int64     `json:"limit"`
	Used   int64     `json:"used"`
	Left   int64     `json:"left"`
	Resets time.Time `json:"resets"`
}

// TokenLimitStatus is a token name's limit (--token-limit) and its
// current windows (nil when the limit has no such window).
type TokenLimitStatus struct {
	Token string       `json:"token"`
	Hour  *LimitWindow `json:"hour,omitempty"`
	Day   *LimitWindow `json:"day,omitempty"`
}

// Limits is GET /v1/limits: the caller's own token's limit (an operator:
// every token's).
type Limits struct {
	Limits []TokenLimitStatus `json:"limits"`
}

// FleetReplica is one replica of GET /v1/fleet.
type FleetReplica struct {
	ID string `json:"id"`
	// Heartbeat is its last beat (absent: it left, or never beat), AgeMS
	// how long ago by the store's clock; Lost once silent for 3 beats.
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
	AgeMS     int64      `json:"age_ms"`
	Lost      bool       `json:"lost"`
	// Turns counts its unfinished turns; Self marks the replica answering.
	Turns int  `json:"turns"`
	Self  bool `json:"self"`
}

// Fleet is GET /v1/fleet: the replicas sharing this server's turn store.
// Without one (Fleet false), the server is alone and Replicas is empty.
type Fleet struct {
	Fleet       bool           `json:"fleet"`
	Replica     string         `json:"replica,omitempty"`
	HeartbeatMS int64          `json:"heartbeat_ms,omitempty"`
	Replicas    []FleetReplica `json:"replicas"`
}

// GCSandbox is what garbage collection found on one served sandbox kind
// (driver.Collection), or why it could not look (Error).
type GCSandbox struct {
	Sandbox string          `json:"sandbox"`
	Where   string          `json:"where,omitempty"`
	Orphans []driver.Orphan `json:"orphans"`
	Kept    int             `json:"kept"`
	Error   string          `json:"error,omitempty"`
}

// GCRun is one garbage collection (`outpost gc`) over every served sandbox
// kind: a dry run lists what it would remove.
type GCRun struct {
	Time      time.Time   `json:"time"`
	DryRun    bool        `json:"dry_run"`
	Sandboxes []GCSandbox `json:"sandboxes"`
}

// GC is GET /v1/gc: what a collection would remove now (a dry run) and
// the last one run through POST /v1/gc, if any.
type GC struct {
	Pending GCRun  `json:"pending"`
	Last    *GCRun `json:"last,omitempty"`
}

// Exchange is one prompt of a conversation and the agent's answer.
type Exchange struct {
	Prompt string `json:"prompt"`
	Answer string `json:"answer"`
}

// History is GET /v1/conversations/{id}/history: the conversation's
// prompts and answers, oldest first. Source says where they come from:
// "history", the stored files read by the preset (harness.History);
// "turns", the turns of it this replica retains (a preset that cannot
// read its files); "none", neither.
type History struct {
	Conversation string     `json:"conversation"`
	Agent        string     `json:"agent"`
	Source       string     `json:"source"`
	Exchanges    []Exchange `json:"exchanges"`
}

// gcState is the last collection run through the API.
type gcState struct {
	mu   sync.Mutex
	last *GCRun
}

// operatorOnly refuses (403) a client's request for an operator's route.
func operatorOnly(w http.ResponseWriter, r *http.Request) bool {
	if principalOf(r.Context()).operator {
		return true
	}
	writeErr(w, fail(outpost.Refused, ReasonForbidden, "this route is an operator's (a token marked operator, docs/serve.md)"))
	return false
}

// redactor redacts the secret values of the server's environment and
// .outpost/.env, and those of env (a request's variables).
func (s *Server) redactor(env map[string]string) *credentials.Redactor {
	red := credentials.NewRedactor()
	table, _ := credentials.Resolve(s.o.Environ, s.o.Workdir) // a broken .env fails the turn later
	for name, v := range table.Vars {
		red.Add(credentials.SecretValues(name, v)...)
	}
	for name, v := range env {
		red.Add(credentials.SecretValues(name, v)...)
	}
	return red
}

func (s *Server) tokenLimits(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r.Context())
	now := time.Now().UTC()
	hourEnd := now.Truncate(time.Hour).Add(time.Hour)
	dayEnd := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	out := Limits{Limits: []TokenLimitStatus{}}
	for name, l := range s.o.TokenLimits {
		if (!p.operator && name != p.token) || (l.PerHour <= 0 && l.PerDay <= 0) {
			continue
		}
		var hour, day int64
		s.windows.mu.Lock()
		win := s.windows.m[name]
		s.windows.mu.Unlock()
		if win != nil {
			hour, day = win.Spent()
		}
		st := TokenLimitStatus{Token: name}
		if l.PerHour > 0 {
			st.Hour = &LimitWindow{Limit: l.PerHour, Used: hour, Left: max(l.PerHour-hour, 0), Resets: hourEnd}
		}
		if l.PerDay > 0 {
			st.Day = &LimitWindow{Limit: l.PerDay, Used: day, Left: max(l.PerDay-day, 0), Resets: dayEnd}
		}
		out.Limits = append(out.Limits, st)
	}
	slices.SortFunc(out.Limits, func(a, b TokenLimitStatus) int { return strings.Compare(a.Token, b.Token) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) fleetStatus(w http.ResponseWriter, r *http.Request) {
	if !operatorOnly(w, r) {
		return
	}
	out := Fleet{Replicas: []FleetReplica{}}
	if s.fleet == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Fleet, out.Replica, out.HeartbeatMS = true, s.o.Replica, s.fleet.beat.Milliseconds()
	l, ok := s.fleet.st.(turnstore.ReplicaLister)
	if !ok {
		writeErr(w, fail(outpost.Configuration, ReasonUnsupported, "this server's turn store does not list its replicas"))
		return
	}
	reps, err := l.Replicas(r.Context())
	if err != nil {
		writeErr(w, storeError(err))
		return
	}
	for _, rep := range reps {
		fr := FleetReplica{ID: rep.ID, AgeMS: rep.Age.Milliseconds(), Turns: rep.Turns, Self: rep.ID == s.o.Replica}
		fr.Lost = rep.Heartbeat.IsZero() || rep.Age >= s.fleet.beat*lostAfter
		if !rep.Heartbeat.IsZero() {
			hb := rep.Heartbeat.UTC()
			fr.Heartbeat = &hb
		}
		out.Replicas = append(out.Replicas, fr)
	}
	writeJSON(w, http.StatusOK, out)
}

// collect runs a collection (`outpost gc`, never --all) over every
// served sandbox kind, with the operator's settings.
func (s *Server) collect(ctx context.Context, dryRun bool) GCRun {
	run := GCRun{Time: time.Now().UTC(), DryRun: dryRun, Sandboxes: []GCSandbox{}}
	for _, name := range s.o.Sandboxes {
		g := GCSandbox{Sandbox: name, Orphans: []driver.Orphan{}}
		key, err := s.poolKey(name, nil, true)
		var p driver.Provider
		if err == nil {
			p, err = s.pool.Provider(key)
		}
		if err == nil {
			var col driver.Collection
			col, err = sandbox.Collect(ctx, p, driver.CollectOptions{DryRun: dryRun})
			g.Where, g.Kept = col.Where, col.Kept
			if col.Orphans != nil {
				g.Orphans = col.Orphans
			}
		}
		if err != nil {
			g.Error = s.redactor(nil).String(outpost.ToJSON(err).Message)
		}
		run.Sandboxes = append(run.Sandboxes, g)
	}
	return run
}

func (s *Server) getGC(w http.ResponseWriter, r *http.Request) {
	if !operatorOnly(w, r) {
		return
	}
	out := GC{Pending: s.collect(r.Context(), true)}
	s.gc.mu.Lock()
	out.Last = s.gc.last
	s.gc.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) postGC(w http.ResponseWriter, r *http.Request) {
	if !operatorOnly(w, r) {
		return
	}
	run := s.collect(r.Context(), false)
	s.gc.mu.Lock()
	s.gc.last = &run
	s.gc.mu.Unlock()
	s.log.Info(s.o.Name+": gc", "sandboxes", len(run.Sandboxes))
	writeJSON(w, http.StatusOK, run)
}

// history is GET /v1/conversations/{id}/history.
func (s *Server) history(w http.ResponseWriter, r *http.Request, id string, m conversation.Meta) {
	out := History{Conversation: m.ID, Agent: m.Agent, Source: "none", Exchanges: []Exchange{}}
	red := s.redactor(nil)
	if h, ok := presets.Lookup(m.Agent); ok && h.History != nil {
		_, files, err := s.o.Store.Get(r.Context(), id)
		if err != nil {
			writeErr(w, outpost.Wrap(outpost.Conversation, "history", err))
			return
		}
		if ex := exchanges(h.History(conversation.TranscriptOf(m.Native, files))); len(ex) > 0 {
			out.Source, out.Exchanges = "history", ex
		}
	} else if ex := s.retainedExchanges(id, principalOf(r.Context())); len(ex) > 0 {
		out.Source, out.Exchanges = "turns", ex
	}
	for i, e := range out.Exchanges {
		out.Exchanges[i] = Exchange{Prompt: red.String(e.Prompt), Answer: red.String(e.Answer)}
	}
	writeJSON(w, http.StatusOK, out)
}

// exchanges groups a preset's history into prompts and answers: each
// user message starts an exchange, the agent's messages after it are
// its answer.
func exchanges(evs []harness.Event) []Exchange {
	var out []Exchange
	for _, ev := range evs {
		if ev.Type != harness.EventMessage || ev.Delta || ev.Text == "" {
			continue
		}
		if ev.Kind == harness.KindUser {
			out = append(out, Exchange{Prompt: ev.Text})
			continue
		}
		if len(out) == 0 {
			out = append(out, Exchange{})
		}
		e := &out[len(out)-1]
		if e.Answer != "" {
			e.Answer += "\n\n"
		}
		e.Answer += ev.Text
	}
	return out
}

// retainedExchanges are the prompts and answers of the finished turns of
// conversation id that this replica retains and p sees, oldest first.
func (s *Server) retainedExchanges(id string, p principal) []Exchange {
	s.mu.Lock()
	var ts []*turn
	for _, t := range s.turns {
		if p.sees(t.owner) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(ts, func(a, b *turn) int { return a.created.Compare(b.created) })
	var out []Exchange
	for _, t := range ts {
		st := t.status()
		if st.Result != nil && st.Result.Conversation == id {
			out = append(out, Exchange{Prompt: st.Prompt, Answer: st.Result.Text})
		}
	}
	return out
}
