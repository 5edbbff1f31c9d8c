package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/otelenv"
)

// BenchmarkTurnInstrumentation is what tracing adds to one turn, alone:
// the Run's metering, the turn's span and its ten step spans, with
// tracing unset (no Logger, OpenTelemetry's no-op provider) and with an
// OTLP/HTTP exporter set. Set beside BenchmarkEchoTurn's turn, it gives
// the overhead ratio of docs/benchmarks.md without the noise of a whole
// turn on a loaded machine.
func BenchmarkTurnInstrumentation(b *testing.B) {
	exporting := exportingProvider(b)
	steps := []string{"begin", "validate", "lease", "plans", "restore", "bootstrap", "run", "usage", "capture", "store+release"}
	h := echo.Harness()
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"unset", nil}, {"exporter", exporting}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o := RunOptions{TracerProvider: tc.tp}
				o.metering = &metering{}
				e := &turnRun{o: &o, h: h, red: credentials.NewRedactor()}
				e.t.Agent.Harness = h
				e.startSpan(context.Background())
				e.meterMark()
				for _, s := range steps {
					e.clock.step(s)
				}
				_ = e.meterEnd(&Result{}, nil)
				e.endSpan(&Result{}, nil)
			}
		})
	}
}

// exportingProvider is the SDK's tracer provider batching every span to
// an OTLP/HTTP endpoint (internal/otelenv's exporter) on loopback that
// discards them; shut down at the benchmark's end.
func exportingProvider(b *testing.B) *sdktrace.TracerProvider {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck
	}))
	b.Cleanup(sink.Close)
	exp, err := otelenv.NewExporter(context.Background(), func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			return sink.URL
		}
		return ""
	})
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// ExportingProvider is exportingProvider for the external benchmarks.
var ExportingProvider = exportingProvider
