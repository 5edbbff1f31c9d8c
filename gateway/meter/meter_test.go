package meter_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/gateway/meter/metertest"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/gemini"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
)

func proxy(t *testing.T, m *meter.Meter, upstream string) string {
	t.Helper()
	return metertest.Proxy(t, m, upstream)
}

// post sends body to base+path and returns the whole response.
func post(t *testing.T, base, path, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func usage(model string, req, in, out, cr, cw, reasoning int64) harness.Metered {
	u := harness.MeteredUsage{Requests: req, ReasoningTokens: reasoning, Usage: harness.Usage{
		InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw, Complete: true}}
	return harness.Metered{MeteredUsage: u, ByModel: map[string]harness.MeteredUsage{model: u}}
}

// TestFakes: the meter's counts of real-shaped responses (the fake APIs'
// JSON and SSE) equal the fakes' token counts exactly, in outpost's terms
// (input without the cached part, output with the reasoning part).
func TestFakes(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	oai := openai.Start(t, openai.Config{Usage: &openai.Usage{InputTokens: 100, CachedTokens: 20, OutputTokens: 10, ReasoningTokens: 3}})
	gem := gemini.Start(t, gemini.Config{})
	const antBody = `{"model":"claude-fake","max_tokens":100,"stream":%s,"messages":[{"role":"user","content":"hi"}]}`
	const respBody = `{"model":"gpt-fake","input":"hi","stream":%s}`
	const chatBody = `{"model":"gpt-fake","messages":[{"role":"user","content":"hi"}],"stream":%s,"stream_options":{"include_usage":true}}`
	const gemBody = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	gu := gemini.DefaultUsage
	gemWant := func(model string) harness.Metered {
		return usage(model, 1, int64(gu.Prompt-gu.Cached), int64(gu.Candidates+gu.Thoughts), int64(gu.Cached), 0, int64(gu.Thoughts))
	}
	for _, tc := range []struct {
		name, api, upstream, path, body string
		want                            harness.Metered
	}{
		{"anthropic/sse", meter.Anthropic, ant.URL(), "/v1/messages", strings.Replace(antBody, "%s", "true", 1), usage("claude-fake", 1, 321, 45, 0, 0, 0)},
		{"anthropic/json", meter.Anthropic, ant.URL(), "/v1/messages", strings.Replace(antBody, "%s", "false", 1), usage("claude-fake", 1, 321, 45, 0, 0, 0)},
		{"responses/sse", meter.OpenAIResponses, oai.Root(), "/v1/responses", strings.Replace(respBody, "%s", "true", 1), usage("gpt-fake", 1, 80, 10, 20, 0, 3)},
		{"responses/json", meter.OpenAIResponses, oai.Root(), "/v1/responses", strings.Replace(respBody, "%s", "false", 1), usage("gpt-fake", 1, 80, 10, 20, 0, 3)},
		{"chat/sse", meter.OpenAIChat, oai.Root(), "/v1/chat/completions", strings.Replace(chatBody, "%s", "true", 1), usage("gpt-fake", 1, 80, 10, 20, 0, 3)},
		{"chat/json", meter.OpenAIChat, oai.Root(), "/v1/chat/completions", strings.Replace(chatBody, "%s", "false", 1), usage("gpt-fake", 1, 80, 10, 20, 0, 3)},
		{"gemini/sse", meter.Gemini, gem.URL(), "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse", gemBody, gemWant("gemini-fake")},
		{"gemini/json", meter.Gemini, gem.URL(), "/v1beta/models/gemini-fake:generateContent", gemBody, gemWant("gemini-fake")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := meter.New(meter.Options{APIs: []string{tc.api}})
			base := proxy(t, m, tc.upstream)
			for range 2 {
				if status, body := post(t, base, tc.path, tc.body, "x-api-key", "k", "Authorization", "Bearer k", "x-goog-api-key", "k"); status != 200 {
					t.Fatalf("status %d: %s", status, body)
				}
			}
			want := tc.want.Add(tc.want)
			want.Complete = true
			if diff := cmp.Diff(want, settled(m).Metered()); diff != "" {
				t.Errorf("metered (-want +got):\n%s", diff)
			}
		})
	}
}

// settled is m once every response it saw was read to its end.
func settled(m *meter.Meter) *meter.Meter {
	m.Settle(time.Minute)
	return m
}

var _ gateway.Meter = (*meter.Meter)(nil)
