package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/server"
)

// TestTraceparent: a turn started with a W3C traceparent runs in the
// caller's trace: its turn span has the caller's trace id and the
// caller's span as its parent.
func TestTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })
	ts := start(t, nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	code, b, _ := ts.do("POST", "/v1/turns", map[string]any{"prompt": "hello"}, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/turns: %d %s", code, b)
	}
	var st server.TurnStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	ts.wait(st.ID)
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() != "outpost.turn" {
			continue
		}
		found = true
		if s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID || !s.Parent().IsRemote() {
			t.Errorf("turn span in trace %s under %s, want %s under %s", s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentID)
		}
	}
	if !found {
		t.Error("no turn span")
	}
}

// TestTraceparentRace: a race's contestants run in the caller's trace,
// each turn span under the caller's span.
func TestTraceparentRace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })
	ts, _ := startHome(t, nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	code, b, _ := ts.do("POST", "/v1/races", map[string]any{"prompt": "hello", "count": 2}, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if code != http.StatusOK {
		t.Fatalf("POST /v1/races: %d %s", code, b)
	}
	n := 0
	for _, s := range rec.Ended() {
		if s.Name() != "outpost.turn" {
			continue
		}
		n++
		if s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID {
			t.Errorf("contestant's turn span in trace %s under %s, want %s under %s", s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentID)
		}
	}
	if n != 2 {
		t.Errorf("%d turn spans, want the 2 contestants'", n)
	}
}

// TestConversationMetered: a conversation's metered usage and budget are
// in GET /v1/conversations/{id} and .../usage (with what is left),
// validated against the OpenAPI document like every exchange.
func TestConversationMetered(t *testing.T) {
	ts := start(t, nil)
	res := ts.wait(ts.startTurn(map[string]any{"prompt": "hello"}).ID)
	id, _ := res["conversation"].(string)
	m, files, err := ts.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	u := harness.MeteredUsage{Requests: 1, Usage: harness.Usage{InputTokens: 300, OutputTokens: 20, Complete: true}}
	m.Metered, m.Budget = &harness.Metered{MeteredUsage: u, ByModel: map[string]harness.MeteredUsage{"m": u}}, 1000
	if err := ts.store.Put(context.Background(), m, files); err != nil {
		t.Fatal(err)
	}
	code, b, _ := ts.do("GET", "/v1/conversations/"+id+"/usage", nil)
	var got struct {
		Metered    harness.Metered `json:"metered"`
		Budget     int64           `json:"budget"`
		BudgetLeft int64           `json:"budget_left"`
	}
	if err := json.Unmarshal(b, &got); code != 200 || err != nil {
		t.Fatalf("usage: %d %s", code, b)
	}
	if got.Budget != 1000 || got.BudgetLeft != 680 || got.Metered.ByModel["m"].InputTokens != 300 {
		t.Errorf("usage %s", b)
	}
	if code, b, _ := ts.do("GET", "/v1/conversations/"+id, nil); code != 200 || !strings.Contains(string(b), `"budget":1000`) || !strings.Contains(string(b), `"by_model"`) {
		t.Errorf("conversation: %d %s", code, b)
	}
}
