package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/otelenv"
	"github.com/outposthq/outpost/internal/testenv"
)

// turnSteps are the step spans of a turn without a repair, in order
// (engine/run.go's e.step calls).
var turnSteps = []string{"validate", "lease", "plans", "restore", "bootstrap", "run", "usage", "capture", "store+release"}

// gatewayToken is the shape of a credential gateway token.
var gatewayToken = regexp.MustCompile(`outpost-[A-Za-z0-9_-]{43}`)

// TestServeTracesToCollector: `outpost serve` (the built binary) with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at a real OpenTelemetry Collector.
// A turn of the real claude, whose model calls the credential gateway
// carries (keyless) to the fake Messages API, started with a caller's
// traceparent: the Collector receives and forwards the turn span in the
// caller's trace under the caller's span, one child span per lifecycle
// step, and one model-call span per call the fake received, with the
// GenAI attributes and the fake's token counts. The API key, the OTLP
// header (a secret of the operator's), the gateway's token and the
// server's canaries are in no span.
func TestServeTracesToCollector(t *testing.T) {
	col := startCollector(t)
	claudeBin := testenv.RequireCLI(t, "claude")
	outpostBinary(t) // built before the environment changes
	const in, out = 321, 45
	fake := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: in, OutputTokens: out}})
	const apiKey, otelSecret = "sk-ant-otel-canary-7f3a9c20", "otel-header-canary-b41d"
	for k, v := range map[string]string{
		"PATH":               filepath.Dir(claudeBin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"ANTHROPIC_BASE_URL": fake.URL(), "ANTHROPIC_API_KEY": apiKey,
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.endpoint, "OTEL_EXPORTER_OTLP_HEADERS": "x-outpost-test=" + otelSecret,
		"OTEL_BSP_SCHEDULE_DELAY": "100", // the batch's delay, in ms
	} {
		t.Setenv(k, v)
	}
	s := startServe(t, "", "")
	const traceID, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	id, err := s.postTurn(map[string]any{"agent": "claude", "model": "claude-sonnet-4-5", "prompt": "say hi",
		"options": map[string]string{claude.OptionMaxRetries: "0", claude.OptionPermissionMode: "bypassPermissions"}},
		"00-"+traceID+"-"+callerSpan+"-01")
	if err != nil {
		t.Fatal(err)
	}
	items, err := s.follow(id, 0, func(e streamed) bool { return e.typ == "result" })
	if err != nil || len(items) == 0 || items[len(items)-1].data["error"] != nil {
		t.Fatalf("turn: %v, last event %+v", err, items[max(0, len(items)-1):])
	}
	calls := fake.MessageRequests()
	if len(calls) == 0 {
		t.Fatal("the fake received no model call")
	}
	for _, c := range calls {
		if c.APIKey != apiKey {
			t.Errorf("the fake received key %q, want the real key the gateway sends", c.APIKey)
		}
	}
	spans := col.wait(func(spans []otlpSpan) bool {
		turn, ok := spanNamed(spans, "outpost.turn")
		return ok && len(childrenOf(spans, turn)) >= len(turnSteps)+len(calls)
	})
	turn, _ := spanNamed(spans, "outpost.turn")
	if turn.TraceID != traceID || turn.Parent != callerSpan || turn.Service != "outpost" || turn.Attrs["outpost.agent"] != "claude" || turn.Status.Code == 2 {
		t.Errorf("turn span %+v: want trace %s under %s, service outpost, agent claude, no error", turn, traceID, callerSpan)
	}
	var steps, models []string
	for _, c := range childrenOf(spans, turn) {
		if c.TraceID != traceID {
			t.Errorf("span %s in trace %s", c.Name, c.TraceID)
		}
		if c.Scope != "github.com/outposthq/outpost/gateway/meter" {
			steps = append(steps, c.Name)
			continue
		}
		model := c.Attrs["gen_ai.request.model"]
		models = append(models, model)
		for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.system": "anthropic",
			"gen_ai.usage.input_tokens": "321", "gen_ai.usage.output_tokens": "45", "http.response.status_code": "200"} {
			if c.Attrs[k] != want {
				t.Errorf("model-call span %s: %s = %q, want %q", c.Name, k, c.Attrs[k], want)
			}
		}
		if c.Name != "chat "+model {
			t.Errorf("model-call span named %q for model %q", c.Name, model)
		}
	}
	if !slices.Equal(steps, turnSteps) {
		t.Errorf("step spans %v, want %v", steps, turnSteps)
	}
	var want []string
	for _, c := range calls {
		want = append(want, c.Model)
	}
	slices.Sort(models)
	slices.Sort(want)
	if !slices.Equal(models, want) {
		t.Errorf("model-call spans for models %v, want one per call the fake received: %v", models, want)
	}
	got := col.forwarded()
	for _, secret := range []string{apiKey, otelSecret, serveCanary, serveCanaryDotEnv} {
		if strings.Contains(got, secret) || strings.Contains(s.logs.String(), secret) {
			t.Errorf("the secret %q is in the spans or the server's logs", secret)
		}
	}
	if tok := gatewayToken.FindString(got); tok != "" {
		t.Errorf("a gateway token is in the spans: %s", tok)
	}
}

// spanNamed is the first span named name.
func spanNamed(spans []otlpSpan, name string) (otlpSpan, bool) {
	i := slices.IndexFunc(spans, func(s otlpSpan) bool { return s.Name == name })
	if i < 0 {
		return otlpSpan{}, false
	}
	return spans[i], true
}

// childrenOf are parent's child spans, in the order they arrived.
func childrenOf(spans []otlpSpan, parent otlpSpan) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.Parent == parent.SpanID && s.TraceID == parent.TraceID {
			out = append(out, s)
		}
	}
	return out
}

// TestExporterToCollector: what outpost's OTLP/HTTP exporter
// (internal/otelenv: OpenTelemetry's otlptrace over outpost's transport)
// sends, the protocol unset or http/protobuf, the real Collector parses into
// the spans that were made: ids, parent, name, kind, status, attributes
// of every type, events, resource and scope.
func TestExporterToCollector(t *testing.T) {
	col := startCollector(t)
	for _, protocol := range []string{"", "http/protobuf"} {
		x, err := otelenv.NewExporter(context.Background(), func(k string) string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(x),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "exporter-test"))))
		ctx, parent := tp.Tracer("scope-"+protocol).Start(context.Background(), "parent "+protocol)
		_, child := tp.Tracer("scope-"+protocol).Start(ctx, "child "+protocol, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("s", "v"), attribute.Int64("i", 1<<40), attribute.Bool("b", true), attribute.Float64("f", 1.5),
			attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2})))
		child.AddEvent("happened", trace.WithAttributes(attribute.Int("n", 3)))
		child.SetStatus(codes.Error, "boom")
		child.End()
		parent.End()
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := col.wait(func(spans []otlpSpan) bool {
			_, ok := spanNamed(spans, "parent "+protocol)
			return ok
		})
		c, _ := spanNamed(spans, "child "+protocol)
		p, _ := spanNamed(spans, "parent "+protocol)
		if c.TraceID != child.SpanContext().TraceID().String() || c.SpanID != child.SpanContext().SpanID().String() ||
			c.Parent != p.SpanID || p.SpanID != parent.SpanContext().SpanID().String() || p.Parent != "" {
			t.Errorf("protocol %q: ids: child %+v, parent %+v", protocol, c, p)
		}
		if c.Service != "exporter-test" || c.Scope != "scope-"+protocol || c.Kind != 3 || c.Status.Code != 2 || c.Status.Message != "boom" ||
			len(c.Events) != 1 || c.Events[0].Name != "happened" || attrMap(c.Events[0].Attrs)["n"] != "3" {
			t.Errorf("protocol %q: child %+v", protocol, c)
		}
		for k, want := range map[string]string{"s": "v", "i": "1099511627776", "b": "true", "f": "1.5",
			"ss": `{"values":[{"stringValue":"a"},{"stringValue":"b"}]}`, "is": `{"values":[{"intValue":"1"},{"intValue":"2"}]}`} {
			if got := c.Attrs[k]; got != want {
				t.Errorf("protocol %q: attribute %s = %s, want %s", protocol, k, got, want)
			}
		}
	}
}
