package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost"
)

// TracerName is the instrumentation scope of the turn's spans.
const TracerName = "github.com/outposthq/outpost/engine"

// run is one turn as a span, with a child span per lifecycle step
// (engine.step) and, from the credential gateway's meter, per model call.
// An inner turn (a repair, a resumed steer) is a child span of its
// outer turn's. The outermost closes the Run's metering.
func (e *turnRun) run(ctx context.Context) (*Result, error) {
	ctx = e.startSpan(ctx)
	e.meterMark()
	res, err := e.runSteps(ctx)
	if !e.ans.inner {
		err = e.meterEnd(res, err)
	}
	e.endSpan(res, err)
	return res, err
}

func (e *turnRun) tracer() trace.Tracer {
	tp := e.o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// startSpan starts the turn's span ("outpost.turn", or "outpost.repair"
// for an inner turn) and returns its context.
func (e *turnRun) startSpan(ctx context.Context) context.Context {
	name := "outpost.turn"
	if e.ans.inner {
		name = "outpost.repair"
	}
	ctx, e.span = e.tracer().Start(ctx, name)
	e.spanCtx = ctx
	if e.span.IsRecording() {
		e.span.SetAttributes(attribute.String("outpost.agent", e.agentName()))
		if e.t.Resume != "" {
			e.span.SetAttributes(attribute.String("outpost.resume", e.t.Resume))
		}
	}
	return ctx
}

// stepSpan records one lifecycle step that ran from start to end.
func (e *turnRun) stepSpan(name string, start, end time.Time) {
	_, s := e.tracer().Start(e.spanCtx, name, trace.WithTimestamp(start))
	s.End(trace.WithTimestamp(end))
}

// endSpan ends the turn's span with its outcome.
func (e *turnRun) endSpan(res *Result, err error) {
	if !e.span.IsRecording() {
		e.span.End()
		return
	}
	if res != nil {
		e.span.SetAttributes(attribute.String("outpost.conversation", res.Conversation),
			attribute.String("outpost.sandbox", res.Sandbox), attribute.String("gen_ai.request.model", res.Model))
	}
	if err != nil {
		e.span.SetAttributes(attribute.String("outpost.code", string(outpost.CodeOf(err))))
		e.span.SetStatus(codes.Error, e.red.String(err.Error()))
	}
	e.span.End()
}
