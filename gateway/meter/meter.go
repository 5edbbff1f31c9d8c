// Package meter counts the tokens of every model call that passes
// through the credential gateway, from the model API's own usage
// figures, and enforces token budgets with a hard stop.
//
// A Meter is a gateway.Meter for one turn's grant. After wraps each
// upstream response's Body: every byte passes to the agent unchanged and
// at once, and the usage the API reports is read on the way (Anthropic
// Messages, OpenAI Responses and Chat Completions, Gemini; whole JSON
// responses and their SSE streams). Before refuses a call, in the API's
// own error shape for a spent quota, once a budget (Limiter) is spent:
// it checks the budget against an estimate of the prompt (its size in
// bytes / 4), and the actual counts are added as the response streams,
// so a budget is exceeded by at most one response.
//
// Each call is also an OpenTelemetry span with the GenAI semantic
// conventions, a child of Options.Context's span.
package meter

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/harness"
)

// Options configure a Meter.
type Options struct {
	// APIs are the protocols of the grant's routes, by route index
	// (harness.Endpoint.API: Anthropic, OpenAIResponses, OpenAIChat,
	// Gemini). A route without one is counted as a request only.
	APIs []string
	// Limits are the budgets; the first spent one refuses calls.
	Limits []Limiter
	// Context is the parent of the model-call spans (the turn's); nil:
	// context.Background().
	Context context.Context
	// TracerProvider makes the spans; nil: the global one (otel), which
	// records nothing unless tracing was set up.
	TracerProvider trace.TracerProvider
}

// Meter counts one grant's model calls. It is safe for concurrent use.
type Meter struct {
	o      Options
	tracer trace.Tracer

	mu       sync.Mutex
	calls    []*call
	pending  map[context.Context]*call // Before's calls awaiting After
	exceeded *Exceeded
	open     int           // calls whose body is still being read
	idle     chan struct{} // closed while open is 0
}

// New returns a meter with no calls counted yet.
func New(o Options) *Meter {
	if o.Context == nil {
		o.Context = context.Background()
	}
	idle := make(chan struct{})
	close(idle)
	return &Meter{o: o, tracer: tracer(o.TracerProvider), pending: map[context.Context]*call{}, idle: idle}
}

// call is one model call.
type call struct {
	m        *Meter
	api      string
	route    int
	reqModel string
	span     trace.Span
	status   int
	r        reading // under m.mu
	counted  int64   // tokens already given to the Limits, under m.mu
	ended    bool
	est      int64 // the prompt's estimate
	prep     prepared
	clean    bool // ended at the body's end, under m.mu
	answered bool // After saw the response, under m.mu
}

func (m *Meter) api(route int) string {
	if route >= 0 && route < len(m.o.APIs) {
		return m.o.APIs[route]
	}
	return ""
}

// Before refuses the call when a budget is spent or would be by the
// prompt's estimate; otherwise it starts the call's span.
func (m *Meter) Before(r *http.Request, route int) *http.Response {
	c := &call{m: m, api: m.api(route), route: route}
	est := estimate(r)
	m.mu.Lock()
	x := m.check(est)
	if x == nil {
		m.pending[r.Context()] = c
	}
	m.mu.Unlock()
	// The meter reads what the API sends: a compressed body it could
	// not. Without the agent's Accept-Encoding the upstream answers
	// plainly, or in gzip that the gateway's transport decodes.
	r.Header.Del("Accept-Encoding")
	c.start(r)
	if x != nil {
		c.refused(x)
		return refusal(c.api, x, r)
	}
	c.est, c.prep = est, prepare(r, c.api)
	// The agent's connection closing before the reply's final usage
	// charges the call at once (charge): the agent's next call is
	// checked against it, while the gateway reads the abandoned reply on.
	context.AfterFunc(r.Context(), func() {
		c.update(func(rd *reading) {
			if c.answered && !c.clean {
				charge(c)(rd)
			}
		})
	})
	return nil
}

// estimate is the prompt's token estimate: its bytes / 4.
func estimate(r *http.Request) int64 {
	if r.ContentLength > 0 {
		return r.ContentLength / 4
	}
	return 0
}

// check returns the first budget that refuses a call of est tokens, and
// keeps it as the meter's Exceeded. Under m.mu.
func (m *Meter) check(est int64) *Exceeded {
	spent := m.tokens()
	for _, l := range m.o.Limits {
		if x := l.Allow(spent, est); x != nil {
			if m.exceeded == nil {
				m.exceeded = x
			}
			return x
		}
	}
	return nil
}

// After wraps the response's Body to read its usage as it streams.
func (m *Meter) After(resp *http.Response, route int) {
	m.mu.Lock()
	var c *call
	if resp.Request != nil {
		c = m.pending[resp.Request.Context()]
		delete(m.pending, resp.Request.Context())
	}
	if c == nil { // a request the gateway forwarded with another context
		for k, p := range m.pending {
			if p.route == route {
				c = p
				delete(m.pending, k)
				break
			}
		}
	}
	if c == nil {
		c = &call{m: m, api: m.api(route), route: route}
	}
	c.status, c.answered = resp.StatusCode, true
	m.calls = append(m.calls, c)
	if m.open == 0 {
		m.idle = make(chan struct{})
	}
	m.open++
	m.mu.Unlock()
	if c.span == nil {
		c.start(resp.Request)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || c.api == "" {
		// An error costs no tokens; a body without a known API is not read.
		c.update(func(r *reading) { r.seen, r.final = true, true })
		c.done(true)
		return
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		// Compressed all the same: counted as a request, incomplete.
		c.update(func(r *reading) { r.broken = true })
		c.done(true)
		return
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	resp.Body = &body{rc: resp.Body, c: c, sse: sse}
	if sse && c.prep.strip {
		resp.Body = &stripUsage{rc: resp.Body}
	}
}

// update changes the call's reading and gives the tokens it adds to the
// budgets.
func (c *call) update(f func(*reading)) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&c.r)
	t := c.usage().Tokens()
	// Down as well as up: a charge (charge) is replaced by the usage read.
	if d := t - c.counted; d != 0 {
		c.counted = t
		for _, l := range m.o.Limits {
			l.Spend(d)
		}
	}
}

// model is the model the call is counted under.
func (c *call) model() string {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.r.model
}

// final says whether the API's last word on usage was read.
func (c *call) final() bool {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.r.final
}

// usage is the call's count. Under m.mu.
func (c *call) usage() harness.MeteredUsage {
	return harness.MeteredUsage{
		Requests: 1,
		Usage: harness.Usage{
			InputTokens: c.r.in, OutputTokens: c.r.out,
			CacheReadTokens: c.r.cacheRead, CacheWriteTokens: c.r.cacheWrite,
			Complete: c.r.final && !c.r.broken,
		},
		ReasoningTokens: c.r.reasoning,
	}
}

// done settles the call: its span ends with its usage.
func (c *call) done(clean bool) {
	c.m.mu.Lock()
	if c.ended {
		c.m.mu.Unlock()
		return
	}
	c.ended, c.clean = true, clean
	if c.m.open--; c.m.open == 0 {
		close(c.m.idle)
	}
	u, model := c.usage(), c.r.model
	c.m.mu.Unlock()
	c.end(u, model, clean)
}

// Metered is what the meter counted so far, in total and per model.
// Complete is false when a response's usage was not read in full, or
// is still streaming.
func (m *Meter) Metered() harness.Metered { return m.Since(0) }

// Len is the number of calls counted so far: Since(Len()) later counts
// the calls after this point.
func (m *Meter) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

// Since is Metered over the calls after the first k.
func (m *Meter) Since(k int) harness.Metered {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := harness.Metered{MeteredUsage: harness.MeteredUsage{Usage: harness.Usage{Complete: true}}}
	for _, c := range m.calls[min(max(k, 0), len(m.calls)):] {
		u := c.usage()
		out.MeteredUsage = out.MeteredUsage.Add(u)
		model := c.r.model
		if model == "" {
			model = c.reqModel
		}
		if model == "" {
			model = "unknown"
		}
		if out.ByModel == nil {
			out.ByModel = map[string]harness.MeteredUsage{}
		}
		if have, ok := out.ByModel[model]; ok {
			out.ByModel[model] = have.Add(u)
		} else {
			out.ByModel[model] = u
		}
	}
	return out
}

// tokens is every token counted so far. Under m.mu.
func (m *Meter) tokens() int64 {
	var n int64
	for _, c := range m.calls {
		n += c.usage().Tokens()
	}
	return n
}

// Settle waits, at most for d, until every response the meter saw was
// read to its end or closed: the agent may be done with a response
// before the gateway read the end of its body.
func (m *Meter) Settle(d time.Duration) {
	m.mu.Lock()
	idle := m.idle
	m.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// Exceeded is the budget that refused a call of this meter, or nil.
func (m *Meter) Exceeded() *Exceeded {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exceeded
}
