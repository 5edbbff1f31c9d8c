package gateway

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/testenv"
)

// brokenTransport answers with a body whose read fails with an error
// quoting the upstream URL, the real key in its query.
type brokenTransport struct{}

func (brokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	body := io.MultiReader(strings.NewReader("data: {}\n\n"), failing{"read " + r.URL.String() + ": connection reset"})
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(body), Request: r}, nil
}

type failing struct{ msg string }

func (f failing) Read([]byte) (int, error) { return 0, errors.New(f.msg) }

// TestErrorLogRedacted: the model proxy's own messages (httputil's, here
// a body read error quoting the upstream URL with the key) reach the
// gateway's Logger as warnings, the secret and the token redacted (the
// fixture scans the log for both), not Go's global logger.
func TestErrorLogRedacted(t *testing.T) {
	var global testenv.LockedBuffer
	log.SetOutput(&global)
	t.Cleanup(func() { log.SetOutput(io.Discard) })
	f := newFixture(t, Options{Transport: brokenTransport{}})
	gr := f.grant(GrantOptions{Routes: []Route{{Upstream: "http://up.invalid/v1", Secret: secret, Credential: QueryKey}}})
	req, _ := http.NewRequest(http.MethodGet, gr.BaseURL(f.addr, 0)+"/models?key="+gr.Token(), nil)
	if resp, err := noProxy.Do(req); err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	_ = f.g.Close() // the record is written before the handler returns
	logs := f.logs.String()
	if !strings.Contains(logs, "ReverseProxy read error") || !strings.Contains(logs, "key=[secret]") {
		t.Errorf("the proxy's message is not in the gateway's log, redacted:\n%s", logs)
	}
	noLeak(t, "the global log", global.String(), gr.Token())
}

// TestRedactingWriter: what Go's global logger gets through
// RedactingWriter names no live grant's secret or token, in plain or
// query-escaped form.
func TestRedactingWriter(t *testing.T) {
	g := New(Options{})
	t.Cleanup(func() { _ = g.Close() })
	gr, err := g.Grant(GrantOptions{Routes: []Route{{Upstream: "http://up.invalid", Secret: secret + "/+", Credential: XAPIKey}}})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	l := log.New(RedactingWriter(&buf), "", 0)
	l.Printf("http2: Transport encoding header %q = %q", "x-api-key", secret+"/+")
	l.Printf("GET http://up.invalid/?key=%s token %s", url.QueryEscape(secret+"/+"), gr.Token())
	noLeak(t, "the redacted log", buf.String(), gr.Token())
	if got := strings.Count(buf.String(), "[secret]"); got != 3 {
		t.Errorf("%d redactions in %q, want 3", got, buf.String())
	}
}
