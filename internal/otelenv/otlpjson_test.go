package otelenv

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpRequest is the part of OTLP's JSON ExportTraceServiceRequest
// (opentelemetry-proto, trace/v1, JSON encoding: lowerCamelCase names,
// hex ids, enums as numbers, 64-bit integers as strings) the test reads.
type otlpRequest struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []json.RawMessage `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Scope struct{ Name string } `json:"scope"`
			Spans []struct {
				TraceID           string `json:"traceId"`
				SpanID            string `json:"spanId"`
				ParentSpanID      string `json:"parentSpanId"`
				Name              string `json:"name"`
				Kind              int    `json:"kind"`
				StartTimeUnixNano string `json:"startTimeUnixNano"`
				EndTimeUnixNano   string `json:"endTimeUnixNano"`
				Attributes        []struct {
					Key   string          `json:"key"`
					Value json.RawMessage `json:"value"`
				} `json:"attributes"`
				Status struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"status"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

// TestExporterJSON: what the exporter posts with http/json is an OTLP
// ExportTraceServiceRequest in OTLP's JSON encoding: ids in hex, the
// parent, kind and status as OTLP numbers them (client 3, error 2),
// times in nanoseconds as strings, attributes of every type, resource
// and scope; with the configured headers, their values percent-decoded
// as W3C baggage is (a "+" stays a plus).
func TestExporterJSON(t *testing.T) {
	got := make(chan otlpRequest, 2)
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req otlpRequest
		if err := json.Unmarshal(b, &req); err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %v\n%s", r.URL.Path, r.Header.Get("Content-Type"), err, b)
		}
		auth = r.Header.Get("Authorization")
		got <- req
	}))
	t.Cleanup(srv.Close)
	x, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL + "/", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
		"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic%20ab+c%3D"}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(x))
	ctx, parent := tp.Tracer("scope-a").Start(context.Background(), "turn")
	_, child := tp.Tracer("scope-a").Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("s", "v"), attribute.Int64("i", 7), attribute.Bool("b", true), attribute.Float64("f", 1.5),
		attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2})))
	child.SetStatus(codes.Error, "boom")
	child.End()
	req := <-got
	parent.End()
	<-got
	if auth != "Basic ab+c=" { // percent-decoded, "+" kept
		t.Errorf("Authorization %q", auth)
	}
	rs := req.ResourceSpans
	if len(rs) != 1 || len(rs[0].ScopeSpans) != 1 || rs[0].ScopeSpans[0].Scope.Name != "scope-a" || len(rs[0].Resource.Attributes) == 0 || len(rs[0].ScopeSpans[0].Spans) != 1 {
		t.Fatalf("request %+v", req)
	}
	s := rs[0].ScopeSpans[0].Spans[0]
	if s.TraceID != child.SpanContext().TraceID().String() || s.SpanID != child.SpanContext().SpanID().String() ||
		s.ParentSpanID != parent.SpanContext().SpanID().String() || len(s.TraceID) != 32 || len(s.SpanID) != 16 {
		t.Errorf("ids %s %s %s", s.TraceID, s.SpanID, s.ParentSpanID)
	}
	start, _ := strconv.ParseInt(s.StartTimeUnixNano, 10, 64)
	end, _ := strconv.ParseInt(s.EndTimeUnixNano, 10, 64)
	if s.Name != "chat m" || s.Kind != 3 || s.Status.Code != 2 || s.Status.Message != "boom" || start == 0 || end < start {
		t.Errorf("span %+v", s)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[a.Key] = string(a.Value)
	}
	for k, want := range map[string]string{"s": `{"stringValue":"v"}`, "i": `{"intValue":"7"}`, "b": `{"boolValue":true}`, "f": `{"doubleValue":1.5}`,
		"ss": `{"arrayValue":{"values":[{"stringValue":"a"},{"stringValue":"b"}]}}`, "is": `{"arrayValue":{"values":[{"intValue":"1"},{"intValue":"2"}]}}`} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %s, want %s", k, attrs[k], want)
		}
	}
}

// TestExporterRefusedEndpoint: a bad endpoint is an error at set-up, a
// non-2xx answer an error of the export.
func TestExporterRefusedEndpoint(t *testing.T) {
	if _, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x"})); err == nil {
		t.Error("ftp endpoint accepted")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(srv.Close)
	x, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces"}))
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
// /v1/traces), the protocol (protobuf unless http/json), the headers
// (trimmed, percent-decoded) and the timeout in milliseconds.
func TestExporterConfig(t *testing.T) {
	type want struct {
		url     string
		json    bool
		headers map[string]string
		timeout time.Duration
	}
	def := want{"http://localhost:4318/v1/traces", false, map[string]string{}, 10 * time.Second}
	with := func(f func(*want)) want { w := def; w.headers = map[string]string{}; f(&w); return w }
	for _, tc := range []struct {
		env  map[string]string
		want want
	}{
		{nil, def},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1/base/"}, with(func(w *want) { w.url = "http://h:1/base/v1/traces" })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://h:2/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1"},
			with(func(w *want) { w.url = "https://h:2/custom" })},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, with(func(w *want) { w.json = true })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, def},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1, b = x%20y ,bad,=v"},
			with(func(w *want) { w.headers = map[string]string{"a": "1", "b": "x y"} })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3", "OTEL_EXPORTER_OTLP_HEADERS": "a=1"},
			with(func(w *want) { w.headers = map[string]string{"c": "3"} })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "250"}, with(func(w *want) { w.timeout = 250 * time.Millisecond })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "250"}, with(func(w *want) { w.timeout = 50 * time.Millisecond })},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, def},
	} {
		x, err := newExporter(env(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		got := want{x.url, x.json, x.headers, x.client.Timeout}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("%v: (-want +got)\n%s", tc.env, diff)
		}
	}
}
