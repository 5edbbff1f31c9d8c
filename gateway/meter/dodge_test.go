package meter_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
)

// throughGateway serves upstream through a real credential gateway whose
// grant is metered by m; it returns the base URL and token for the agent.
func throughGateway(t *testing.T, m *meter.Meter, upstream string, cred gateway.Credential) (string, string) {
	t.Helper()
	g := gateway.New(gateway.Options{})
	t.Cleanup(func() { _ = g.Close() })
	addr, err := g.Listen()
	if err != nil {
		t.Fatal(err)
	}
	gr, err := g.Grant(gateway.GrantOptions{Routes: []gateway.Route{{Upstream: upstream, Secret: "sk-real", Credential: cred}}, Meter: m})
	if err != nil {
		t.Fatal(err)
	}
	return gr.BaseURL(addr, 0), gr.Token()
}

var noProxy = &http.Client{Transport: &http.Transport{Proxy: nil}}

// TestChatWithoutUsageStopped: an openai-chat agent that streams without
// stream_options.include_usage (the API then reports no usage) is counted
// all the same, and --max-tokens stops it within one response: the
// gateway asks for the usage, and the agent never sees the usage chunk
// it did not ask for. An agent that asks gets it.
func TestChatWithoutUsageStopped(t *testing.T) {
	oai := openai.Start(t, openai.Config{Usage: &openai.Usage{InputTokens: 100, OutputTokens: 10}})
	const body = `{"model":"gpt-fake","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{}}`
	// The agent's request asks for no usage: an empty stream_options, or
	// none at all.
	for _, req := range []string{body, strings.Replace(body, `,"stream_options":{}`, "", 1)} {
		m := meter.New(meter.Options{APIs: []string{meter.OpenAIChat}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 300}}})
		base, tok := throughGateway(t, m, oai.Root(), gateway.Bearer)
		var statuses []int
		for range 6 {
			status, got := post(t, base, "/v1/chat/completions", req, "Authorization", "Bearer "+tok)
			statuses = append(statuses, status)
			if status == 200 && (strings.Contains(got, `"choices":[]`) || strings.Contains(got, `"prompt_tokens"`)) {
				t.Errorf("the agent got the usage chunk it did not ask for:\n%s", got)
			}
			if status != 200 && !strings.Contains(got, meter.RefusalPrefix) {
				t.Errorf("refused with %d %s, want outpost's budget refusal", status, got)
			}
			m.Settle(time.Minute)
		}
		// 110 tokens a call: 110, 220, 330, then refused.
		if want := []int{200, 200, 200, 429, 429, 429}; !slices.Equal(statuses, want) {
			t.Errorf("%s: statuses %v, want %v", req, statuses, want)
		}
		if got := m.Metered().Tokens(); got != 330 {
			t.Errorf("%s: metered %d tokens, want 330", req, got)
		}
		if x := m.Exceeded(); x == nil || x.Budget != meter.BudgetTurn || x.Spent != 330 {
			t.Errorf("%s: exceeded %+v, want the turn budget with 330 spent", req, x)
		}
	}
	for _, r := range oai.Requests() {
		if !strings.Contains(string(r.RawBody), `"include_usage":true`) {
			t.Errorf("the API was not asked for usage: %s", r.RawBody)
		}
	}
	// An agent that asks for usage gets its chunk.
	m2 := meter.New(meter.Options{APIs: []string{meter.OpenAIChat}})
	base2, tok2 := throughGateway(t, m2, oai.Root(), gateway.Bearer)
	asked := strings.Replace(body, `"stream_options":{}`, `"stream_options":{"include_usage":true}`, 1)
	if status, got := post(t, base2, "/v1/chat/completions", asked, "Authorization", "Bearer "+tok2); status != 200 || !strings.Contains(got, `"prompt_tokens"`) {
		t.Errorf("an agent that asked for usage: %d\n%s", status, got)
	}
}

// TestDroppedStreamStopped: an Anthropic agent that drops each stream
// before its final usage (message_delta) is counted in full (the gateway
// reads the abandoned reply on, upstream-side), and --max-tokens stops
// it within one response: the next call is refused.
func TestDroppedStreamStopped(t *testing.T) {
	slow := anthropic.Slow("one two three four", 0)
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 315, OutputTokens: 7800}, Default: &slow, SlowDelay: 50 * time.Millisecond})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 1000}}})
	base, tok := throughGateway(t, m, ant.URL(), gateway.XAPIKey)
	drop := func() int {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(antStream))
		req.Header.Set("x-api-key", tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := noProxy.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), meter.RefusalPrefix) {
				t.Errorf("refused with %d %s, want outpost's budget refusal", resp.StatusCode, b)
			}
			return resp.StatusCode
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.HasPrefix(sc.Text(), "event: content_block_delta") {
		}
		return 200 // dropped after the first delta, long before message_delta
	}
	first := drop()
	// The gateway reads the abandoned reply on (the agent's next call
	// meanwhile is checked against its charge at max_tokens).
	m.Settle(time.Minute)
	second := drop()
	if first != 200 || second != 400 {
		t.Errorf("statuses %d, %d: want the second call refused", first, second)
	}
	m.Settle(time.Minute)
	if got := m.Metered(); got.OutputTokens != 7800 || got.InputTokens != 315 {
		t.Errorf("metered %+v, want the whole reply's 315 in and 7800 out", got.MeteredUsage)
	}
	if n := len(ant.MessageRequests()); n != 1 {
		t.Errorf("the API received %d calls, want 1", n)
	}
}

// TestAbandonedCharged: a reply the agent leaves whose usage cannot be
// read after all (the upstream is gone too) is charged at the request's
// max_tokens, and the prompt's estimate when the API said nothing.
func TestAbandonedCharged(t *testing.T) {
	m := meter.New(meter.Options{APIs: []string{meter.OpenAIChat}})
	r, _ := http.NewRequest(http.MethodPost, "http://x/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":777,"stream":true,"messages":[]}`))
	if m.Before(r, 0) != nil {
		t.Fatal("refused")
	}
	b, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(b), `"include_usage":true`) || r.ContentLength != int64(len(b)) {
		t.Errorf("forwarded body %s (length %d)", b, r.ContentLength)
	}
	up := io.NopCloser(io.MultiReader(strings.NewReader("data: {\"choices\":[{\"delta\":{}}]}\n\n"), errReader{}))
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: up, Request: r}
	m.After(resp, 0)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	m.Settle(time.Minute)
	if got := m.Metered(); got.OutputTokens != 777 || got.InputTokens <= 0 || got.Complete {
		t.Errorf("metered %+v, want 777 out charged, the prompt's estimate in, incomplete", got.MeteredUsage)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
