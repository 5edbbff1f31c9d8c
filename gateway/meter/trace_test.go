package meter_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
)

// TestSpans: each model call is a span, a child of the meter's context,
// with the GenAI semantic conventions' attributes and its usage; a
// refused call's span is an error.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, turn := tp.Tracer("test").Start(context.Background(), "turn")
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Context: ctx, TracerProvider: tp,
		Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 380}}})
	base := proxy(t, m, ant.URL())
	post(t, base, "/v1/messages", antStream)
	post(t, base, "/v1/messages", antStream)
	settled(m)
	turn.End()
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	call := spans[0]
	if call.Parent().SpanID() != turn.SpanContext().SpanID() || call.Name() != "chat claude-fake" {
		t.Errorf("span %q, parent %v", call.Name(), call.Parent().SpanID())
	}
	got := map[attribute.Key]attribute.Value{}
	for _, a := range call.Attributes() {
		got[a.Key] = a.Value
	}
	for k, v := range map[attribute.Key]attribute.Value{
		"gen_ai.system":              attribute.StringValue("anthropic"),
		"gen_ai.operation.name":      attribute.StringValue("chat"),
		"gen_ai.request.model":       attribute.StringValue("claude-fake"),
		"gen_ai.response.model":      attribute.StringValue("claude-fake"),
		"gen_ai.usage.input_tokens":  attribute.Int64Value(321),
		"gen_ai.usage.output_tokens": attribute.Int64Value(45),
		"http.response.status_code":  attribute.IntValue(200),
	} {
		if diff := cmp.Diff(v.Emit(), got[k].Emit()); diff != "" {
			t.Errorf("%s (-want +got): %s", k, diff)
		}
	}
	if refused := spans[1]; refused.Status().Code.String() != "Error" {
		t.Errorf("the refused call's span: %v", refused.Status())
	}
}
