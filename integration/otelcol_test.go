package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/testenv"
)

// otelcolBinary is the OpenTelemetry Collector scripts/build-otelcol.sh
// builds from its Go modules (internal/tools/otelcol), at the release its
// go.mod pins; a missing one fails the test under CI and skips it loudly
// elsewhere.
func otelcolBinary(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join("..", "internal", "tools", "otelcol", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.opentelemetry\.io/collector/otelcol (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("internal/tools/otelcol/go.mod pins no Collector release")
	}
	bin := filepath.Join(testenv.Cache(), "otelcol", string(m[1]), "otelcol")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "the OpenTelemetry Collector "+string(m[1])+" ("+bin+")", "scripts/build-otelcol.sh")
	}
	return bin
}

// collector is a running OpenTelemetry Collector: its OTLP receiver
// (HTTP, on loopback) takes spans, and its OTLP/HTTP exporter forwards
// what it parsed, in OTLP's JSON encoding, to a server of the test's,
// which keeps it.
type collector struct {
	t        *testing.T
	endpoint string // the receiver's base URL (OTEL_EXPORTER_OTLP_ENDPOINT)
	logs     *lockedBuffer

	mu      sync.Mutex
	raw     []string   // every request the Collector forwarded
	spans   []otlpSpan // their spans
	changed chan struct{}
}

// otlpSpan is one span as the Collector forwarded it.
type otlpSpan struct {
	Service string            `json:"-"` // the resource's service.name
	Scope   string            `json:"-"`
	TraceID string            `json:"traceId"`
	SpanID  string            `json:"spanId"`
	Parent  string            `json:"parentSpanId"`
	Name    string            `json:"name"`
	Kind    int               `json:"kind"`
	Attrs   map[string]string `json:"-"`
	Status  struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	RawAttrs []otlpAttr `json:"attributes"`
	Events   []struct {
		Name  string     `json:"name"`
		Attrs []otlpAttr `json:"attributes"`
	} `json:"events"`
}

type otlpAttr struct {
	Key   string                     `json:"key"`
	Value map[string]json.RawMessage `json:"value"`
}

// text is an attribute's value as text: a string's or a number's (OTLP's
// JSON writes 64-bit integers as strings), a bool's, or an array's JSON.
func (a otlpAttr) text() string {
	for _, raw := range a.Value {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return string(raw)
	}
	return ""
}

func attrMap(as []otlpAttr) map[string]string {
	m := make(map[string]string, len(as))
	for _, a := range as {
		m[a.Key] = a.text()
	}
	return m
}

// startCollector runs the Collector with a pipeline from its OTLP receiver
// to its OTLP/HTTP exporter, which posts JSON to the test's server.
func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := otelcolBinary(t)
	c := &collector{t: t, logs: &lockedBuffer{}, changed: make(chan struct{})}
	sink := httptest.NewServer(http.HandlerFunc(c.receive))
	t.Cleanup(sink.Close)
	port := freePort(t)
	c.endpoint = "http://127.0.0.1:" + port
	cfg := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(otelcolConfig, port, sink.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("collector logs:\n%s", c.logs.String())
		}
	})
	// Ready when the receiver takes an empty export.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Post(c.endpoint+"/v1/traces", "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		select {
		case <-exited:
			t.Fatalf("the collector exited:\n%s", c.logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector's receiver did not answer (%v):\n%s", err, c.logs.String())
		}
	}
}

// otelcolConfig: the receiver's port, the test server's URL. The
// Collector's own metrics are off (no listener on :8888), and the
// exporter neither queues nor retries: what it forwards arrives at once.
const otelcolConfig = `receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%s
exporters:
  otlp_http:
    traces_endpoint: %s/v1/traces
    encoding: json
    compression: none
    sending_queue:
      enabled: false
    retry_on_failure:
      enabled: false
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp_http]
`

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// receive keeps one ExportTraceServiceRequest the Collector forwarded.
func (c *collector) receive(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []otlpAttr `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Scope struct {
					Name string `json:"name"`
				} `json:"scope"`
				Spans []otlpSpan `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if r.URL.Path != "/v1/traces" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(b, &req) != nil {
		c.t.Errorf("the collector forwarded %s %s (%s): %.300s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), b)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.raw = append(c.raw, string(b))
	for _, rs := range req.ResourceSpans {
		service := attrMap(rs.Resource.Attributes)["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				s.Service, s.Scope, s.Attrs = service, ss.Scope.Name, attrMap(s.RawAttrs)
				c.spans = append(c.spans, s)
			}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte("{}"))
}

// wait returns the spans forwarded so far once done holds for them, or
// fails the test after a minute.
func (c *collector) wait(done func([]otlpSpan) bool) []otlpSpan {
	c.t.Helper()
	timeout := time.After(time.Minute)
	for {
		c.mu.Lock()
		spans, changed := append([]otlpSpan(nil), c.spans...), c.changed
		c.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-timeout:
			c.t.Fatalf("the collector forwarded %d spans, not what the test waits for: %s", len(spans), spanNames(spans))
		}
	}
}

// forwarded is every request body the Collector forwarded.
func (c *collector) forwarded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.raw, "\n")
}

func spanNames(spans []otlpSpan) string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// postTurn starts a turn on s with a W3C traceparent header.
func (s *served) postTurn(req map[string]any, traceparent string) (string, error) {
	b, _ := json.Marshal(req)
	r, _ := http.NewRequestWithContext(context.Background(), "POST", "http://outpost/v1/turns", bytes.NewReader(b))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("traceparent", traceparent)
	resp, err := s.client.Do(r)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct{ ID string }
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &st) != nil {
		return "", fmt.Errorf("POST /v1/turns: %d %s", resp.StatusCode, body)
	}
	return st.ID, nil
}
