// Package otelenv sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, and only when they ask for it: without them
// the global tracer provider stays OpenTelemetry's no-op one, and a
// span costs next to nothing.
package otelenv

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Wanted reports whether the environment (getenv) asks for traces:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// with OTEL_TRACES_EXPORTER unset; never with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. Another exporter is an error, and so is
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc: only OTLP over HTTP is
// built in, in protobuf's encoding (http/protobuf, the default; like
// OpenTelemetry's own Go exporters, outpost does not send http/json).
func Wanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp (or none) is supported", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%s: only OTLP over HTTP in protobuf (http/protobuf) is supported", v, p)
			}
			break
		}
	}
	return true, nil
}

// Setup installs, when Wanted, a global tracer provider that batches
// spans to an OTLP/HTTP endpoint (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT,
// _PROTOCOL, _HEADERS and _TIMEOUT; default http://localhost:4318) and the W3C trace
// context propagator; the resource's service.name is "outpost" unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. The
// returned shutdown flushes the spans; it is a no-op when nothing was
// set up.
func Setup(ctx context.Context, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	ok, err := Wanted(getenv)
	if !ok || err != nil {
		return none, err
	}
	exp, err := NewExporter(ctx, getenv)
	if err != nil {
		return none, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "outpost")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
