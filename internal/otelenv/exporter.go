package otelenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// NewExporter is the OTLP/HTTP span exporter Setup installs: the
// OpenTelemetry exporter (otlptrace), which turns the SDK's spans into
// OTLP's protobuf messages, over client, a small OTLP/HTTP transport.
// Its endpoint, headers and timeout come from getenv's standard
// variables (the traces-specific one first).
//
// The transport is outpost's rather than otlptracehttp's: that module
// imports the collector's generated gRPC service, which would add about
// 30 MB to the binary and 3 ms of package initialisation to every
// outpost command, traced or not (docs/metering.md). What is posted is
// the same message: TracesData, which opentelemetry-proto defines to be
// wire-compatible with ExportTraceServiceRequest.
func NewExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	c, err := newClient(getenv)
	if err != nil {
		return nil, err
	}
	return otlptrace.New(ctx, c)
}

// client posts OTLP/HTTP in protobuf's binary encoding (http/protobuf).
type client struct {
	url     string
	headers map[string]string
	http    *http.Client
	stopped atomic.Bool
}

var _ otlptrace.Client = (*client)(nil)

func newClient(getenv func(string) string) (*client, error) {
	pick := func(name string) string {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	c := &client{url: getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), headers: map[string]string{},
		http: &http.Client{Timeout: 10 * time.Second}}
	if c.url == "" {
		base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			base = "http://localhost:4318"
		}
		c.url = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if u, err := url.Parse(c.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not repeated: it may hold a password.
		return nil, fmt.Errorf("the OTLP traces endpoint is not an http(s) URL")
	}
	// W3C baggage's format: name=value pairs, the values percent-encoded
	// ("+" is a plus). A value is never said anywhere: it may be a secret.
	for _, kv := range strings.Split(pick("HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); ok && k != "" {
			if d, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
				c.headers[k] = d
			}
		}
	}
	if ms, err := strconv.Atoi(pick("TIMEOUT")); err == nil && ms > 0 {
		c.http.Timeout = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

// Start does nothing: the HTTP client connects on the first upload.
func (c *client) Start(context.Context) error { return nil }

// Stop makes later uploads fail, as the SDK's contract for a shut-down
// exporter asks.
func (c *client) Stop(context.Context) error {
	c.stopped.Store(true)
	return nil
}

// UploadTraces posts one request of spans.
func (c *client) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	if c.stopped.Load() {
		return errors.New("OTLP export: the exporter is shut down")
	}
	body, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: spans})
	if err != nil {
		return fmt.Errorf("OTLP export: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("OTLP export: the request could not be made")
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error repeats the URL, which may hold a password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("OTLP export: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP export: %s", resp.Status)
	}
	return nil
}
