package otelenv

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// pbMsg is a decoded protobuf message: each field number's values (the
// raw bytes of a length-delimited field, else the varint or fixed64).
type pbMsg map[protowire.Number][]pbVal

type pbVal struct {
	bytes []byte
	num   uint64
}

func decodePB(t *testing.T, b []byte) pbMsg {
	t.Helper()
	m := pbMsg{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v pbVal
		switch typ {
		case protowire.BytesType:
			v.bytes, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			v.num, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			v.num, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v.num = uint64(x)
		default:
			t.Fatalf("field %d: wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		m[num] = append(m[num], v)
	}
	return m
}

func (m pbMsg) msg(t *testing.T, num protowire.Number, i int) pbMsg {
	t.Helper()
	if len(m[num]) <= i {
		t.Fatalf("field %d has %d values, want %d", num, len(m[num]), i+1)
	}
	return decodePB(t, m[num][i].bytes)
}

func (m pbMsg) str(num protowire.Number) string {
	if len(m[num]) == 0 {
		return ""
	}
	return string(m[num][0].bytes)
}

func (m pbMsg) num(num protowire.Number) uint64 {
	if len(m[num]) == 0 {
		return 0
	}
	return m[num][0].num
}

// TestExporterProtobuf: by default (and with http/protobuf) the exporter
// posts an ExportTraceServiceRequest in protobuf's binary encoding, with
// the field numbers of opentelemetry-proto: resource, scope, binary ids,
// parent, kind, times, status, events and attributes of every type.
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
		x, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}))
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

		req := decodePB(t, body)
		rs := req.msg(t, 1, 0)
		if len(req[1]) != 1 || len(rs.msg(t, 1, 0)[1]) == 0 {
			t.Errorf("protocol %q: resource spans %v", protocol, req)
		}
		ss := rs.msg(t, 2, 0)
		if ss.msg(t, 1, 0).str(1) != "scope-b" || len(ss[2]) != 1 {
			t.Fatalf("protocol %q: scope spans %v", protocol, ss)
		}
		s := ss.msg(t, 2, 0)
		tid, sid, pid := child.SpanContext().TraceID(), child.SpanContext().SpanID(), parent.SpanContext().SpanID()
		if s.str(1) != string(tid[:]) || s.str(2) != string(sid[:]) || s.str(4) != string(pid[:]) || s.str(5) != "chat m" || s.num(6) != 3 ||
			s.num(7) == 0 || s.num(8) < s.num(7) {
			t.Errorf("protocol %q: span %v", protocol, s)
		}
		if st := s.msg(t, 15, 0); st.str(2) != "boom" || st.num(3) != 2 {
			t.Errorf("protocol %q: status %v", protocol, st)
		}
		if e := s.msg(t, 11, 0); e.str(2) != "e" || e.num(1) == 0 || e.msg(t, 3, 0).msg(t, 2, 0).num(3) != 3 {
			t.Errorf("protocol %q: event %v", protocol, e)
		}
		attrs := map[string]pbMsg{}
		for i := range s[9] {
			kv := s.msg(t, 9, i)
			attrs[kv.str(1)] = kv.msg(t, 2, 0)
		}
		if v := attrs["s"]; v.str(1) != "v" {
			t.Errorf("string attribute %v", v)
		}
		if v := attrs["i"]; int64(v.num(3)) != -7 {
			t.Errorf("int attribute %v", v)
		}
		if v := attrs["b"]; len(v[2]) != 1 || v.num(2) != 0 {
			t.Errorf("bool attribute %v: a false value must still be set", v)
		}
		if v := attrs["f"]; math.Float64frombits(v.num(4)) != 1.5 {
			t.Errorf("double attribute %v", v)
		}
		if arr := attrs["ss"].msg(t, 5, 0); len(arr[1]) != 2 || arr.msg(t, 1, 1).str(1) != "b" {
			t.Errorf("array attribute %v", arr)
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
		x, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": "api-key=" + secret}))
		if err == nil {
			err = x.ExportSpans(context.Background(), spansOf(t))
		}
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("endpoint %q: error %v: want an error without the secret", endpoint, err)
		}
	}
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(ok.Close)
	x, err := newExporter(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ok.URL}))
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
