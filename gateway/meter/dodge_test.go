package meter_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
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
// before its final usage (message_delta), after its first delta or after
// content_block_stop, is counted in full (the gateway reads the abandoned
// reply on, upstream-side), and --max-tokens stops it within one
// response: the next call is refused. The API holds the message_delta
// back until the agent has dropped the stream, so the gateway cannot have
// read it before.
func TestDroppedStreamStopped(t *testing.T) {
	for _, until := range []string{"event: content_block_delta", "event: content_block_stop"} {
		t.Run(strings.TrimPrefix(until, "event: "), func(t *testing.T) {
			api := heldUsage(t, 315, 7800)
			m := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 1000}}})
			base, tok := throughGateway(t, m, api.url, gateway.XAPIKey)
			drop := func() int {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(antStream))
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
				for sc.Scan() && sc.Text() != until {
				}
				sc.Scan() // the event's data line
				return 200
			}
			first := drop()
			api.dropped(t, m)
			close(api.release) // the usage comes only now, to the gateway alone
			m.Settle(time.Minute)
			second := drop()
			if first != 200 || second != 400 {
				t.Errorf("statuses %d, %d: want the second call refused", first, second)
			}
			if got := m.Metered(); got.OutputTokens != 7800 || got.InputTokens != 315 {
				t.Errorf("metered %+v, want the whole reply's 315 in and 7800 out", got.MeteredUsage)
			}
			if n := api.calls.Load(); n != 1 {
				t.Errorf("the API received %d calls, want 1", n)
			}
		})
	}
}

// heldAPI is an Anthropic messages stream whose message_delta (the
// output tokens) waits for release, or for the caller (the gateway) to go,
// which closes gone; after release, 256 KiB of pings come first.
type heldAPI struct {
	url           string
	release, gone chan struct{}
	calls         atomic.Int64
}

// dropped waits until the gateway has taken the agent's drop in: it
// charged the call at its max_tokens (and reads the reply on), or it
// hung up on the API. Polled: the meter has no signal for it.
func (a *heldAPI) dropped(t *testing.T, m *meter.Meter) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a measure
	for m.Metered().OutputTokens < 100 {    // antStream's max_tokens
		select {
		case <-a.gone:
			return
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway neither charged the dropped call nor hung up on the API")
		}
	}
}

func heldUsage(t *testing.T, in, out int) *heldAPI {
	a := &heldAPI{release: make(chan struct{}), gone: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(name string, data any) {
			_ = anthropic.WriteEvent(w, name, data)
			_ = http.NewResponseController(w).Flush()
		}
		usage := func(o int) map[string]any { return map[string]any{"input_tokens": in, "output_tokens": o} }
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_held", "type": "message", "role": "assistant", "model": "claude-fake", "content": []any{}, "usage": usage(1)}})
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "one two"}})
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		select {
		case <-a.release:
		case <-r.Context().Done():
			close(a.gone)
			return
		}
		// The gateway's copy to the agent, which is gone, fails on these
		// (so the gateway reads on by itself), well short of its 8 MiB.
		for range 64 {
			send("ping", map[string]any{"type": "ping", "pad": strings.Repeat("x", 4<<10)})
		}
		send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": usage(out)})
		send("message_stop", map[string]any{"type": "message_stop"})
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
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
