package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outposthq/outpost/engine"
)

// TestTurnSpans: a turn is a span with a child per lifecycle step, and
// the steps are the same as the --trace log's (one instrumentation), in
// the same order; a failed turn's span carries its code.
func TestTurnSpans(t *testing.T) {
	f := newFixture(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var log bytes.Buffer
	f.ok(engine.Turn{Prompt: "hello"}, func(o *engine.RunOptions) {
		o.TracerProvider = tp
		o.Logger = slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var logged []string
	for _, line := range bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")) {
		var r struct{ Msg, Step string }
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Msg == "step" {
			logged = append(logged, r.Step)
		}
	}
	spans := rec.Ended()
	turn := spans[len(spans)-1]
	if turn.Name() != "outpost.turn" {
		t.Fatalf("the last span ended is %q", turn.Name())
	}
	var steps []string
	for _, s := range spans[:len(spans)-1] {
		if s.Parent().SpanID() != turn.SpanContext().SpanID() {
			t.Errorf("span %q is not the turn's child", s.Name())
		}
		if s.StartTime().Before(turn.StartTime()) || s.EndTime().After(turn.EndTime()) {
			t.Errorf("step %q lies outside its turn", s.Name())
		}
		steps = append(steps, s.Name())
	}
	want := []string{"validate", "lease", "plans", "restore", "bootstrap", "run", "usage", "capture", "store+release"}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("step spans (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(logged, steps); diff != "" {
		t.Errorf("the --trace log and the spans differ (-log +spans):\n%s", diff)
	}

	rec2 := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec2)
	if _, err := f.run(engine.Turn{Prompt: "#quota"}, func(o *engine.RunOptions) { o.TracerProvider = tp }); err == nil {
		t.Fatal("#quota succeeded")
	}
	ended := rec2.Ended()
	last := ended[len(ended)-1]
	if last.Status().Code.String() != "Error" || !hasAttr(last, "outpost.code", "quota") {
		t.Errorf("failed turn's span: %v %v", last.Status(), last.Attributes())
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, k, v string) bool {
	for _, a := range s.Attributes() {
		if string(a.Key) == k && a.Value.AsString() == v {
			return true
		}
	}
	return false
}
