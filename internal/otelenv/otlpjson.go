package otelenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporter posts spans to an OTLP/HTTP endpoint, in protobuf's binary
// encoding (http/protobuf, OTLP's default) or in OTLP's JSON encoding
// (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=http/json). It is written here
// rather than taken from the exporters/otlp module, whose generated gRPC
// service would add some 30 MB and 3 ms of package initialisation to
// every outpost command, traced or not (docs/metering.md).
type exporter struct {
	url     string
	json    bool
	headers map[string]string
	client  *http.Client
	stopped atomic.Bool
}

var _ sdktrace.SpanExporter = (*exporter)(nil)

// NewExporter is the OTLP/HTTP span exporter Setup installs, with its
// endpoint, protocol, headers and timeout from getenv's standard
// variables (the traces-specific one first).
func NewExporter(getenv func(string) string) (sdktrace.SpanExporter, error) {
	return newExporter(getenv)
}

func newExporter(getenv func(string) string) (*exporter, error) {
	pick := func(name string) string {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	x := &exporter{url: getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), json: pick("PROTOCOL") == "http/json",
		headers: map[string]string{}, client: &http.Client{Timeout: 10 * time.Second}}
	if x.url == "" {
		base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			base = "http://localhost:4318"
		}
		x.url = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if u, err := url.Parse(x.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not repeated: it may hold a password.
		return nil, fmt.Errorf("the OTLP traces endpoint is not an http(s) URL")
	}
	// W3C baggage's format: name=value pairs, the values percent-encoded
	// ("+" is a plus). A value is never said anywhere: it may be a secret.
	for _, kv := range strings.Split(pick("HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); ok && k != "" {
			if d, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
				x.headers[k] = d
			}
		}
	}
	if ms, err := strconv.Atoi(pick("TIMEOUT")); err == nil && ms > 0 {
		x.client.Timeout = time.Duration(ms) * time.Millisecond
	}
	return x, nil
}

// ExportSpans posts one ExportTraceServiceRequest.
func (x *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if x.stopped.Load() {
		return errors.New("OTLP export: the exporter is shut down")
	}
	if len(spans) == 0 {
		return nil
	}
	body, ctype := protoRequest(spans), "application/x-protobuf"
	if x.json {
		b, err := json.Marshal(request(spans))
		if err != nil {
			return err
		}
		body, ctype = b, "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range x.headers {
		req.Header.Set(k, v)
	}
	resp, err := x.client.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP export: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP export: %s", resp.Status)
	}
	return nil
}

// Shutdown stops the exporter: later exports fail, as the SDK's contract
// asks.
func (x *exporter) Shutdown(context.Context) error {
	x.stopped.Store(true)
	return nil
}

type obj = map[string]any

// batch is the spans of one resource and instrumentation scope.
type batch struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// group groups spans by resource and instrumentation scope, in the order
// they come.
func group(spans []sdktrace.ReadOnlySpan) []*batch {
	type key struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	var out []*batch
	byKey := map[key]*batch{}
	for _, s := range spans {
		k := key{s.Resource(), s.InstrumentationScope()}
		b := byKey[k]
		if b == nil {
			b = &batch{res: k.res, scope: k.scope}
			byKey[k] = b
			out = append(out, b)
		}
		b.spans = append(b.spans, s)
	}
	return out
}

// resAttrs is a batch's resource attributes.
func (b *batch) resAttrs() []attribute.KeyValue {
	if b.res == nil {
		return nil
	}
	return b.res.Attributes()
}

// request is the JSON ExportTraceServiceRequest of spans, grouped by
// resource and instrumentation scope.
func request(spans []sdktrace.ReadOnlySpan) obj {
	var rs []any
	for _, b := range group(spans) {
		var ss []any
		for _, s := range b.spans {
			ss = append(ss, span(s))
		}
		rs = append(rs, obj{
			"resource":   obj{"attributes": attributes(b.resAttrs())},
			"scopeSpans": []any{obj{"scope": obj{"name": b.scope.Name, "version": b.scope.Version}, "spans": ss}},
		})
	}
	return obj{"resourceSpans": rs}
}

// statusCodes maps the API's status codes to OTLP's.
var statusCodes = map[codes.Code]int{codes.Unset: 0, codes.Ok: 1, codes.Error: 2}

func span(s sdktrace.ReadOnlySpan) obj {
	sc := s.SpanContext()
	o := obj{
		"traceId": sc.TraceID().String(), "spanId": sc.SpanID().String(),
		"name": s.Name(), "kind": int(s.SpanKind()),
		"startTimeUnixNano": nanos(s.StartTime()), "endTimeUnixNano": nanos(s.EndTime()),
		"attributes": attributes(s.Attributes()),
		"status":     obj{"code": statusCodes[s.Status().Code], "message": s.Status().Description},
	}
	if p := s.Parent(); p.SpanID().IsValid() {
		o["parentSpanId"] = p.SpanID().String()
	}
	if ts := sc.TraceState().String(); ts != "" {
		o["traceState"] = ts
	}
	var events []any
	for _, e := range s.Events() {
		events = append(events, obj{"name": e.Name, "timeUnixNano": nanos(e.Time), "attributes": attributes(e.Attributes)})
	}
	if events != nil {
		o["events"] = events
	}
	return o
}

func nanos(t time.Time) string { return strconv.FormatUint(unixNanos(t), 10) }

// unixNanos is t in nanoseconds since the epoch, 0 for the zero time.
func unixNanos(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

func attributes(kvs []attribute.KeyValue) []any {
	out := make([]any, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, obj{"key": string(kv.Key), "value": value(kv.Value)})
	}
	return out
}

func value(v attribute.Value) obj {
	switch v.Type() {
	case attribute.BOOL:
		return obj{"boolValue": v.AsBool()}
	case attribute.INT64:
		return obj{"intValue": strconv.FormatInt(v.AsInt64(), 10)}
	case attribute.FLOAT64:
		return obj{"doubleValue": v.AsFloat64()}
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), attribute.StringValue)
	}
	return obj{"stringValue": v.Emit()}
}

func array[T any](xs []T, of func(T) attribute.Value) obj {
	vals := make([]any, 0, len(xs))
	for _, x := range xs {
		vals = append(vals, value(of(x)))
	}
	return obj{"arrayValue": obj{"values": vals}}
}
