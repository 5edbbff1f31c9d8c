package otelenv

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// protoRequest is the ExportTraceServiceRequest of spans in protobuf's
// binary encoding (opentelemetry-proto: collector/trace/v1, trace/v1,
// common/v1, resource/v1), written field by field with protowire, which
// outpost links anyway: the generated OTLP types would bring the gRPC
// service with them. Fields at their default value are left out, as
// proto3 does, except a value's oneof.
func protoRequest(spans []sdktrace.ReadOnlySpan) []byte {
	var out []byte
	for _, b := range group(spans) {
		// ResourceSpans: its Resource, one ScopeSpans (scope, spans).
		out = protoMsg(out, 1, func(m []byte) []byte {
			m = protoMsg(m, 1, func(r []byte) []byte { return protoAttrs(r, 1, b.resAttrs()) })
			return protoMsg(m, 2, func(ss []byte) []byte {
				ss = protoMsg(ss, 1, func(sc []byte) []byte {
					return protoString(protoString(sc, 1, b.scope.Name), 2, b.scope.Version)
				})
				for _, s := range b.spans {
					ss = protoMsg(ss, 2, func(m []byte) []byte { return protoSpan(m, s) })
				}
				return ss
			})
		})
	}
	return out
}

// protoSpan appends the fields of one Span.
func protoSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protoBytes(b, 1, tid[:])
	b = protoBytes(b, 2, sid[:])
	b = protoString(b, 3, sc.TraceState().String())
	if p := s.Parent().SpanID(); p.IsValid() {
		b = protoBytes(b, 4, p[:])
	}
	b = protoString(b, 5, s.Name())
	b = protoVarint(b, 6, uint64(s.SpanKind()))
	b = protoFixed64(b, 7, unixNanos(s.StartTime()))
	b = protoFixed64(b, 8, unixNanos(s.EndTime()))
	b = protoAttrs(b, 9, s.Attributes())
	for _, e := range s.Events() {
		b = protoMsg(b, 11, func(m []byte) []byte {
			return protoAttrs(protoString(protoFixed64(m, 1, unixNanos(e.Time)), 2, e.Name), 3, e.Attributes)
		})
	}
	st := s.Status()
	if code := statusCodes[st.Code]; code != 0 || st.Description != "" {
		b = protoMsg(b, 15, func(m []byte) []byte {
			return protoVarint(protoString(m, 2, st.Description), 3, uint64(code))
		})
	}
	return b
}

// protoAttrs appends kvs as repeated KeyValue field num.
func protoAttrs(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = protoMsg(b, num, func(m []byte) []byte {
			return protoMsg(protoString(m, 1, string(kv.Key)), 2, func(v []byte) []byte { return protoValue(v, kv.Value) })
		})
	}
	return b
}

// protoValue appends the fields of an AnyValue: its oneof is written
// even when it holds the default value (an empty string, false, 0).
func protoValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, 4, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.BOOLSLICE:
		return protoArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return protoArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return protoArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return protoArray(b, v.AsStringSlice(), attribute.StringValue)
	}
	return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), v.Emit())
}

// protoArray appends an ArrayValue (AnyValue field 5) of xs.
func protoArray[T any](b []byte, xs []T, of func(T) attribute.Value) []byte {
	return protoMsg(b, 5, func(a []byte) []byte {
		for _, x := range xs {
			a = protoMsg(a, 1, func(v []byte) []byte { return protoValue(v, of(x)) })
		}
		return a
	})
}

// protoMsg appends field num holding the message body writes.
func protoMsg(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), body(nil))
}

func protoBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func protoString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func protoVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func protoFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}
