package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/harness"
)

// settleTimeout bounds the wait for the gateway to finish reading the
// responses the agent is done with (meter.Settle).
const settleTimeout = 2 * time.Second

// metering is one Run's meter, shared by its inner turns (repairs,
// steering), so that --max-tokens holds for the whole turn.
type metering struct {
	mu sync.Mutex
	m  *meter.Meter
}

// turnMeter is the meter of the turn's grant at the credential gateway
// (gateway.GrantOptions.Meter); apis are the grant's routes' protocols
// (harness.Endpoint.API), by route index. Every grant of one Run, its
// repairs' and resumed steers' included, gets the same meter, made on
// the first call with the turn's budgets: RunOptions.MaxTokens,
// RunOptions.Budget (or the resumed conversation's) over what the
// conversation's earlier turns spent, and RunOptions.Limits.
func (e *turnRun) turnMeter(apis []string) *meter.Meter {
	mt := e.o.metering
	if mt == nil { // an engine not started by Run
		mt = &metering{}
		e.o.metering = mt
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if mt.m == nil {
		var limits []meter.Limiter
		if e.o.MaxTokens > 0 {
			limits = append(limits, meter.Limit{Budget: meter.BudgetTurn, Tokens: e.o.MaxTokens})
		}
		if b := e.budget(); b > 0 {
			var before int64
			if e.t.Resume != "" && e.parent.Metered != nil {
				before = e.parent.Metered.Tokens()
			}
			limits = append(limits, meter.Limit{Budget: meter.BudgetConversation, Tokens: b, Before: before})
		}
		limits = append(limits, e.o.Limits...)
		mt.m = meter.New(meter.Options{APIs: apis, Limits: limits, Context: e.spanCtx, TracerProvider: e.o.TracerProvider})
	}
	return mt.m
}

// meterNow is the Run's meter, or nil when nothing was metered.
func (e *turnRun) meterNow() *meter.Meter {
	if e.o.metering == nil {
		return nil
	}
	e.o.metering.mu.Lock()
	defer e.o.metering.mu.Unlock()
	return e.o.metering.m
}

// budget is the conversation's token budget: RunOptions.Budget, else
// the resumed conversation's.
func (e *turnRun) budget() int64 {
	if e.o.Budget > 0 {
		return e.o.Budget
	}
	if e.t.Resume != "" {
		return e.parent.Budget
	}
	return 0
}

// meterMark notes where this engine's share of the Run's meter starts.
func (e *turnRun) meterMark() {
	if m := e.meterNow(); m != nil {
		e.meterFrom = m.Len()
	}
}

// meterUsage gives a turn whose CLI reports no usage
// (harness.UsageUnavailable) the gateway's count as its usage, before
// it is stored.
func (e *turnRun) meterUsage(res *Result) {
	mt := e.meterNow()
	if mt == nil || e.h.Usage != harness.UsageUnavailable {
		return
	}
	mt.Settle(settleTimeout)
	res.Usage = mt.Since(e.meterFrom).Usage
}

// meterMeta adds this engine's metered usage and the budget to the
// stored conversation's metadata.
func (e *turnRun) meterMeta(m *conversation.Meta) {
	if b := e.budget(); b > 0 {
		m.Budget = b
	}
	mt := e.meterNow()
	if mt == nil {
		return
	}
	mt.Settle(settleTimeout)
	own := mt.Since(e.meterFrom)
	if m.Metered != nil && e.t.Resume != "" {
		own = m.Metered.Add(own)
	}
	m.Metered = &own
}

// refusedTurn reports whether a budget refused this engine's model calls
// before any reached the API: a turn that did nothing, not stored and not
// counted (docs/metering.md).
func (e *turnRun) refusedTurn() bool {
	mt := e.meterNow()
	if mt == nil || mt.Exceeded() == nil {
		return false
	}
	mt.Settle(settleTimeout)
	return mt.Since(e.meterFrom).Requests == 0
}

// meterEnd closes a Run's metering: Result.Metered, a notice when the
// CLI's own usage differs, and the budget error when a budget refused a
// call, whatever the agent made of the refusal.
func (e *turnRun) meterEnd(res *Result, err error) error {
	mt := e.meterNow()
	if mt == nil {
		if e.o.MaxTokens > 0 || e.budget() > 0 || len(e.o.Limits) > 0 {
			e.notice("budget", "the token budget was not enforced: the turn's model calls did not pass through the credential gateway", nil)
		}
		return err
	}
	mt.Settle(settleTimeout)
	if res != nil {
		u := mt.Metered()
		res.Metered = &u
		e.compareUsage(res.Usage, u)
	}
	if x := mt.Exceeded(); x != nil {
		be := x.Err("run", e.h.Name)
		var oe *outpost.Error
		if errors.As(err, &oe) { // keep what the turn's error says of the capture
			for k, v := range oe.Details {
				if _, ok := be.Details[k]; !ok {
					be.Detail(k, v)
				}
			}
		}
		return be
	}
	return err
}

// compareUsage notices a difference beyond rounding (1%, at least one
// token) between the CLI's usage and the metered one, when both are
// complete: input (cache reads and writes included, which presets split
// in their own ways) and output.
func (e *turnRun) compareUsage(cli harness.Usage, m harness.Metered) {
	if !cli.Complete || !m.Complete || m.Requests == 0 {
		return
	}
	in := func(u harness.Usage) int64 { return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens }
	differ := func(a, b int64) bool { return abs(a-b) > max(1, max(a, b)/100) }
	if differ(in(cli), in(m.Usage)) || differ(cli.OutputTokens, m.OutputTokens) {
		e.notice("metered", fmt.Sprintf("the agent reported %d input and %d output tokens; the gateway counted %d and %d",
			in(cli), cli.OutputTokens, in(m.Usage), m.OutputTokens),
			map[string]any{"usage": cli, "metered": m.MeteredUsage})
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
