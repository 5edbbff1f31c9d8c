package engine_test

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkEchoTurnTracing is BenchmarkEchoTurn's outpost turn with
// tracing unset (OpenTelemetry's no-op provider: what every turn pays
// when no OTEL_* variable is set) and with an exporter set (the SDK's
// provider batching every span to an OTLP/HTTP endpoint (internal/otelenv's exporter) on loopback
// that discards them), for docs/benchmarks.md.
func BenchmarkEchoTurnTracing(b *testing.B) {
	exporting := engine.ExportingProvider(b)
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"unset", nil}, {"exporter", exporting}} {
		b.Run(tc.name, func(b *testing.B) {
			p := local.New(&local.Options{BaseDir: b.TempDir()})
			o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Environ: []string{"PATH=" + os.Getenv("PATH")},
				OnEvent: func(harness.Event) {}, TracerProvider: tc.tp}
			wd := b.TempDir()
			for b.Loop() {
				if _, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
