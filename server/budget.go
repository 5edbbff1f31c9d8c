package server

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/gateway/meter"
)

// TokenLimit is the operator's token budget for one token name
// (Options.TokenLimits): model-API tokens per UTC hour and per UTC day,
// summed over every turn started with a token of that name and counted
// at the credential gateway (docs/metering.md). Zero: no limit.
type TokenLimit struct {
	PerHour int64 `json:"per_hour,omitempty"`
	PerDay  int64 `json:"per_day,omitempty"`
}

// windows are the running per-token-name budgets, made on first use.
type windows struct {
	mu sync.Mutex
	m  map[string]*meter.Window
}

// limitsFor is the budgets of a turn the peer starts: its token name's
// window, if the operator set a limit for it.
func (s *Server) limitsFor(peer string) []meter.Limiter {
	l, ok := s.o.TokenLimits[peer]
	if !ok || (l.PerHour <= 0 && l.PerDay <= 0) {
		return nil
	}
	s.windows.mu.Lock()
	defer s.windows.mu.Unlock()
	if s.windows.m == nil {
		s.windows.m = map[string]*meter.Window{}
	}
	w := s.windows.m[peer]
	if w == nil {
		w = &meter.Window{PerHour: l.PerHour, PerDay: l.PerDay}
		s.windows.m[peer] = w
	}
	return []meter.Limiter{w}
}

// callerTrace is the trace a request continues: its W3C traceparent
// (and tracestate) header, when valid.
func callerTrace(r *http.Request) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return trace.SpanContextFromContext(ctx)
}

// runContext is the context a turn runs in: the turn's, continuing the
// caller's trace when it sent one.
func (t *turn) runContext() context.Context {
	if t.trace.IsValid() {
		return trace.ContextWithRemoteSpanContext(t.ctx, t.trace)
	}
	return t.ctx
}
