package meter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/outposthq/outpost"
)

// The budgets a Limiter enforces (Exceeded.Budget and the details of an
// error with code budget).
const (
	BudgetTurn         = "turn"         // RunOptions.MaxTokens (--max-tokens)
	BudgetConversation = "conversation" // RunOptions.Budget (--budget)
	BudgetToken        = "token"        // serve's per-token-name limits
)

// Exceeded says which budget refused a call, and why.
type Exceeded struct {
	Budget string // BudgetTurn, BudgetConversation or BudgetToken
	Limit  int64  // the budget in tokens
	Spent  int64  // the tokens spent against it when the call was refused
	Window string // "hour" or "day" for BudgetToken
	// Estimate is the refused call's prompt, estimated (its bytes / 4):
	// a budget not spent yet refuses a call whose estimate is more than
	// what is left.
	Estimate int64
}

// Left is what was left of the budget when the call was refused (what
// `outpost usage` shows for a conversation's), never below 0.
func (x *Exceeded) Left() int64 { return max(x.Limit-x.Spent, 0) }

// Error says the budget and why the call was refused, in the figures
// `outpost usage` shows: spent, or not enough left for the next call's
// prompt.
func (x *Exceeded) Error() string {
	w := ""
	if x.Window != "" {
		w = " per " + x.Window
	}
	name := fmt.Sprintf("the %s budget of %d tokens%s", x.Budget, x.Limit, w)
	if x.Left() == 0 {
		return fmt.Sprintf("%s is spent (%d tokens used)", name, x.Spent)
	}
	return fmt.Sprintf("%s has %d tokens left (%d used), fewer than the next model call's prompt needs (about %d tokens)", name, x.Left(), x.Spent, x.Estimate)
}

// Err is the turn's error for x: code budget, with details limit, spent,
// left, estimate and budget (and window for a token budget).
func (x *Exceeded) Err(op, agent string) *outpost.Error {
	e := &outpost.Error{Code: outpost.Budget, Op: op, Agent: agent, Err: x}
	e = e.Detail("limit", x.Limit).Detail("spent", x.Spent).Detail("left", x.Left()).Detail("estimate", x.Estimate).Detail("budget", x.Budget)
	if x.Window != "" {
		e = e.Detail("window", x.Window)
	}
	return e
}

// Limiter is a budget. Allow is asked before each call with the tokens
// the meter counted so far and the call's estimate, and refuses it with
// a non-nil *Exceeded. Spend receives every token counted, as it is: a
// negative count takes back part of a charge for an abandoned reply
// whose usage was read after all.
type Limiter interface {
	Allow(spent, estimate int64) *Exceeded
	Spend(tokens int64)
}

// Limit is a budget over the meter's own count plus Before (the tokens
// spent before this meter, for a conversation's earlier turns).
type Limit struct {
	Budget string // BudgetTurn or BudgetConversation
	Tokens int64  // the budget; zero or less refuses every call
	Before int64
}

// Allow refuses a call once the budget is spent or the estimate would
// cross it.
func (l Limit) Allow(spent, est int64) *Exceeded {
	s := l.Before + spent
	if s >= l.Tokens || s+est > l.Tokens {
		return &Exceeded{Budget: l.Budget, Limit: l.Tokens, Spent: s, Estimate: est}
	}
	return nil
}

// Spend does nothing: a Limit reads the meter's own count.
func (Limit) Spend(int64) {}

// Window is a per-token-name budget of outpost serve, per hour and per
// day (UTC clock windows), shared by every turn of that token name. It
// is safe for concurrent use. Zero limits are no limit.
type Window struct {
	PerHour, PerDay int64
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu          sync.Mutex
	hour, day   time.Time
	hourN, dayN int64
}

func (w *Window) roll() {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	t := now().UTC()
	if h := t.Truncate(time.Hour); !h.Equal(w.hour) {
		w.hour, w.hourN = h, 0
	}
	if d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC); !d.Equal(w.day) {
		w.day, w.dayN = d, 0
	}
}

// Allow refuses a call once this hour's or today's tokens are spent, or
// the estimate would cross them.
func (w *Window) Allow(_, est int64) *Exceeded {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll()
	for _, c := range []struct {
		limit, spent int64
		name         string
	}{{w.PerHour, w.hourN, "hour"}, {w.PerDay, w.dayN, "day"}} {
		if c.limit > 0 && (c.spent >= c.limit || c.spent+est > c.limit) {
			return &Exceeded{Budget: BudgetToken, Limit: c.limit, Spent: c.spent, Window: c.name, Estimate: est}
		}
	}
	return nil
}

// Spend adds tokens to this hour's and today's.
func (w *Window) Spend(tokens int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll()
	w.hourN = max(w.hourN+tokens, 0)
	w.dayN = max(w.dayN+tokens, 0)
}

// Spent is this hour's and today's tokens so far.
func (w *Window) Spent() (hour, day int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll()
	return w.hourN, w.dayN
}

// RefusalPrefix begins the message of every refusal: what the agent
// shows says it is outpost's budget, not the user's account with the
// model's vendor.
const RefusalPrefix = "outpost budget: "

// refusal is the response a refused call gets, in api's own shape for an
// error its CLIs do not retry: Anthropic's 400 invalid_request_error (as
// for a spent credit balance, whose words Claude Code would show in
// place of the message), OpenAI's 429 insufficient_quota, Gemini's 429
// RESOURCE_EXHAUSTED with a per-day QuotaFailure; each says
// x-should-retry: false, which the vendors' SDKs honour. The message
// says it is outpost's budget (RefusalPrefix); OpenAI's and Gemini's keep
// the vendors' "exceeded your current quota", which their CLIs read.
func refusal(api string, x *Exceeded, r *http.Request) *http.Response {
	msg := RefusalPrefix + x.Error() + "; the API was not called"
	quota := msg + ". You exceeded your current quota of outpost tokens, not your account's with the API"
	status := http.StatusTooManyRequests
	var v any
	switch api {
	case Anthropic:
		status = http.StatusBadRequest
		v = map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
			"message": msg + " (a token budget of outpost's, not your Anthropic account's balance)"}}
	case Gemini:
		v = map[string]any{"error": map[string]any{"code": 429, "status": "RESOURCE_EXHAUSTED",
			"message": quota,
			"details": []any{map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
				"violations": []any{map[string]any{"quotaMetric": "outpost/tokens",
					"quotaId": "OutpostTokensPerDay-" + x.Budget}}}}}}
	default: // OpenAI's, also for an unknown API
		v = map[string]any{"error": map[string]any{"type": "insufficient_quota", "code": "insufficient_quota",
			"param": nil, "message": quota}}
	}
	b, _ := json.Marshal(v)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Should-Retry", "false")
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: r,
	}
}

// BudgetRace is the budget of Shared when its Name is empty: the tokens
// of every contestant of an outpost race together.
const BudgetRace = "race"

// Shared is one budget that several turns spend together (the total
// budget of a race, --budget): each turn's meter asks it before every
// call and adds what the call spent. It is safe for concurrent use.
type Shared struct {
	Name   string // the budget's name in Exceeded; "" is BudgetRace
	Tokens int64  // the budget; zero or less refuses every call

	mu    sync.Mutex
	spent int64
}

// Allow refuses a call once the shared budget is spent or the estimate
// would cross it.
func (s *Shared) Allow(_, est int64) *Exceeded {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spent >= s.Tokens || s.spent+est > s.Tokens {
		name := s.Name
		if name == "" {
			name = BudgetRace
		}
		return &Exceeded{Budget: name, Limit: s.Tokens, Spent: s.spent, Estimate: est}
	}
	return nil
}

// Spend adds the tokens a call spent.
func (s *Shared) Spend(tokens int64) {
	s.mu.Lock()
	s.spent += tokens
	s.mu.Unlock()
}

// Spent is what the turns spent so far.
func (s *Shared) Spent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spent
}
