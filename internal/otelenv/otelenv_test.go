package otelenv_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/outposthq/outpost/internal/otelenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestWanted: traces only when the variables ask for them.
func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		want    bool
		wantErr bool
	}{
		{nil, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
	} {
		got, err := otelenv.Wanted(env(tc.env))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%v: %v, %v; want %v, error %v", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestSetupExports: with an endpoint set, a span reaches it over
// OTLP/HTTP at shutdown; without, nothing is installed.
func TestSetupExports(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			b, _ := io.ReadAll(r.Body)
			if len(b) > 0 {
				posts.Add(1)
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	before := otel.GetTracerProvider()
	shutdown, err := otelenv.Setup(context.Background(), env(nil))
	if err != nil || otel.GetTracerProvider() != before {
		t.Fatalf("set up without variables: %v", err)
	}
	_ = shutdown(context.Background())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	shutdown, err = otelenv.Setup(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { otel.SetTracerProvider(before) })
	_, span := otel.Tracer("test").Start(context.Background(), "x")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Error("no span reached the OTLP endpoint")
	}
}
