package otelenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestExporterProtobuf: by default (and with http/protobuf) the exporter
// posts OTLP in protobuf's binary encoding that opentelemetry-proto's own
// messages read back: resource, scope, binary ids, parent, kind, times,
// status, events and attributes of every type.
func TestExporterProtobuf(t *testing.T) {
	for _, protocol := range []string{"", "http/protobuf"} {
		got := make(chan []byte, 2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
				t.Errorf("protocol %q: %s %s", protocol, r.URL.Path, r.Header.Get("Content-Type"))
			}
			got <- b
		}))
		x, err := NewExporter(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}))
		if err != nil {
			t.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(x))
		ctx, parent := tp.Tracer("scope-b").Start(context.Background(), "turn")
		_, child := tp.Tracer("scope-b").Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("s", "v"), attribute.Int64("i", -7), attribute.Bool("b", false), attribute.Float64("f", 1.5),
			attribute.StringSlice("ss", []string{"a", "b"})))
		child.AddEvent("e", trace.WithAttributes(attribute.Int("n", 3)))
		child.SetStatus(codes.Error, "boom")
		child.End()
		body := <-got
		parent.End()
		<-got
		srv.Close()

		var req tracepb.TracesData
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Fatalf("protocol %q: %v", protocol, err)
		}
		if len(req.ResourceSpans) != 1 || len(req.ResourceSpans[0].GetResource().GetAttributes()) == 0 {
			t.Fatalf("protocol %q: resource spans %v", protocol, &req)
		}
		ss := req.ResourceSpans[0].ScopeSpans
		if len(ss) != 1 || ss[0].GetScope().GetName() != "scope-b" || len(ss[0].Spans) != 1 {
			t.Fatalf("protocol %q: scope spans %v", protocol, ss)
		}
		s := ss[0].Spans[0]
		tid, sid, pid := child.SpanContext().TraceID(), child.SpanContext().SpanID(), parent.SpanContext().SpanID()
		if !bytes.Equal(s.TraceId, tid[:]) || !bytes.Equal(s.SpanId, sid[:]) || !bytes.Equal(s.ParentSpanId, pid[:]) || s.Name != "chat m" ||
			s.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.StartTimeUnixNano == 0 || s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("protocol %q: span %v", protocol, s)
		}
		if st := s.GetStatus(); st.GetMessage() != "boom" || st.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("protocol %q: status %v", protocol, st)
		}
		if len(s.Events) != 1 || s.Events[0].Name != "e" || s.Events[0].TimeUnixNano == 0 || s.Events[0].Attributes[0].GetValue().GetIntValue() != 3 {
			t.Errorf("protocol %q: events %v", protocol, s.Events)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value.String()
		}
		want := map[string]*commonpb.AnyValue{
			"s": {Value: &commonpb.AnyValue_StringValue{StringValue: "v"}},
			"i": {Value: &commonpb.AnyValue_IntValue{IntValue: -7}},
			"b": {Value: &commonpb.AnyValue_BoolValue{BoolValue: false}},
			"f": {Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1.5}},
			"ss": {Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{
				{Value: &commonpb.AnyValue_StringValue{StringValue: "a"}}, {Value: &commonpb.AnyValue_StringValue{StringValue: "b"}}}}}},
		}
		for k, v := range want {
			if attrs[k] != v.String() {
				t.Errorf("protocol %q: attribute %s = %s, want %s", protocol, k, attrs[k], v)
			}
		}
	}
}

// TestExporterSecrets: an export's error never holds a header's value
// (OTEL_EXPORTER_OTLP_HEADERS carries API keys) or the endpoint's
// password, nor does a refused endpoint's; after Shutdown an export
// fails, as the SDK's contract asks.
func TestExporterSecrets(t *testing.T) {
	const secret = "hdr-secret-91c2"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	dead := srv.URL
	srv.Close()
	for _, endpoint := range []string{dead, strings.Replace(dead, "http://", "http://user:"+secret+"@", 1), "ftp://user:" + secret + "@x", "http://[" + secret} {
		x, err := NewExporter(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": "api-key=" + secret}))
		if err == nil {
			err = x.ExportSpans(context.Background(), spansOf(t))
		}
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("endpoint %q: error %v: want an error without the secret", endpoint, err)
		}
	}
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(ok.Close)
	x, err := NewExporter(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ok.URL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.ExportSpans(context.Background(), spansOf(t)); err != nil {
		t.Fatal(err)
	}
	_ = x.Shutdown(context.Background())
	if err := x.ExportSpans(context.Background(), spansOf(t)); err == nil {
		t.Error("an export after Shutdown succeeded")
	}
}

// spansOf is one ended span.
func spansOf(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	_, s := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t").Start(context.Background(), "x")
	s.End()
	return rec.Ended()
}

// TestExporterRefusedEndpoint: a bad endpoint is an error at set-up, a
// non-2xx answer an error of the export.
func TestExporterRefusedEndpoint(t *testing.T) {
	if _, err := NewExporter(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x"})); err == nil {
		t.Error("ftp endpoint accepted")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(srv.Close)
	x, err := NewExporter(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.ExportSpans(context.Background(), spansOf(t)); err == nil {
		t.Error("a 503 was taken for success")
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestExporterConfig: the standard variables, the traces-specific one
// first: the endpoint (the traces one as it is, the general one with
// /v1/traces), the headers (trimmed, percent-decoded) and the timeout in
// milliseconds.
func TestExporterConfig(t *testing.T) {
	type want struct {
		url     string
		headers map[string]string
		timeout time.Duration
	}
	def := want{"http://localhost:4318/v1/traces", map[string]string{}, 10 * time.Second}
	with := func(f func(*want)) want { w := def; w.headers = map[string]string{}; f(&w); return w }
	for _, tc := range []struct {
		env  map[string]string
		want want
	}{
		{nil, def},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1/base/"}, with(func(w *want) { w.url = "http://h:1/base/v1/traces" })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://h:2/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1"},
			with(func(w *want) { w.url = "https://h:2/custom" })},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1, b = x%20y+z ,bad,=v"},
			with(func(w *want) { w.headers = map[string]string{"a": "1", "b": "x y+z"} })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3", "OTEL_EXPORTER_OTLP_HEADERS": "a=1"},
			with(func(w *want) { w.headers = map[string]string{"c": "3"} })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "250"}, with(func(w *want) { w.timeout = 250 * time.Millisecond })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "250"}, with(func(w *want) { w.timeout = 50 * time.Millisecond })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, def},
	} {
		c, err := newClient(env(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		got := want{c.url, c.headers, c.http.Timeout}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("%v: (-want +got)\n%s", tc.env, diff)
		}
	}
}
