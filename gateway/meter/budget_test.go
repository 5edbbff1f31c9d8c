package meter_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
)

const antStream = `{"model":"claude-fake","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestBudgetHardStop: a turn budget of 500 tokens with responses of 366
// (321 in, 45 out): the second call still starts (366 spent, the prompt
// estimated below the rest), the third is refused in Anthropic's shape
// without reaching the API. The budget is exceeded by that one response
// only, and the meter says which budget and by how much.
func TestBudgetHardStop(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn, Tokens: 500}}})
	base := proxy(t, m, ant.URL())
	var last string
	statuses := []int{}
	for range 4 {
		s, body := post(t, base, "/v1/messages", antStream)
		statuses = append(statuses, s)
		last = body
	}
	if diff := cmp.Diff([]int{200, 200, 400, 400}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if got := len(ant.MessageRequests()); got != 2 {
		t.Errorf("the API received %d calls, want 2", got)
	}
	if got := settled(m).Metered().Tokens(); got != 732 {
		t.Errorf("metered %d tokens, want 732", got)
	}
	want := &meter.Exceeded{Budget: meter.BudgetTurn, Limit: 500, Spent: 732}
	if diff := cmp.Diff(want, m.Exceeded()); diff != "" {
		t.Errorf("exceeded (-want +got):\n%s", diff)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("refusal %q: %v", last, err)
	}
	if !claude.Quota(e.Error.Message) {
		t.Errorf("claude does not take %q for a spent quota", e.Error.Message)
	}
	oe := m.Exceeded().Err("run", "claude")
	if outpost.ExitCode(oe) != 11 || oe.Details["budget"] != "turn" || oe.Details["limit"] != int64(500) || oe.Details["spent"] != int64(732) {
		t.Errorf("error %v, details %v", oe, oe.Details)
	}
}

// TestBudgetEstimate: a prompt whose estimate (bytes / 4) would cross
// the budget is refused before the call, although nothing was spent.
func TestBudgetEstimate(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{})
	m := meter.New(meter.Options{APIs: []string{meter.Anthropic}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetConversation, Tokens: 1000, Before: 900}}})
	base := proxy(t, m, ant.URL())
	big := strings.Replace(antStream, `"hi"`, `"`+strings.Repeat("x", 400)+`"`, 1)
	if s, _ := post(t, base, "/v1/messages", big); s != 400 {
		t.Errorf("status %d, want the refusal", s)
	}
	if n := len(ant.MessageRequests()); n != 0 {
		t.Errorf("the API received %d calls", n)
	}
	if x := m.Exceeded(); x == nil || x.Budget != meter.BudgetConversation || x.Spent != 900 {
		t.Errorf("exceeded %+v", x)
	}
}

// TestRefusalShapes: each API's refusal is its own error for a spent
// quota (what the CLI shows for it is the preset's to classify; Claude
// Code shows the API's message) and says not to retry.
func TestRefusalShapes(t *testing.T) {
	for _, tc := range []struct {
		api    string
		status int
		want   string
	}{
		{meter.Anthropic, 400, "credit balance is too low"},
		{meter.OpenAIResponses, 429, `"type":"insufficient_quota"`},
		{meter.OpenAIChat, 429, `"code":"insufficient_quota"`},
		{meter.Gemini, 429, `"status":"RESOURCE_EXHAUSTED"`},
	} {
		m := meter.New(meter.Options{APIs: []string{tc.api}, Limits: []meter.Limiter{meter.Limit{Budget: meter.BudgetTurn}}})
		r, _ := http.NewRequest(http.MethodPost, "http://x/v1/x", strings.NewReader("{}"))
		resp := m.Before(r, 0)
		if resp == nil {
			t.Fatalf("%s: a spent budget let the call through", tc.api)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || resp.Header.Get("X-Should-Retry") != "false" || !json.Valid(b) {
			t.Errorf("%s: %d %v %s", tc.api, resp.StatusCode, resp.Header, b)
		}
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %s lacks %s", tc.api, b, tc.want)
		}
	}
}

// TestWindow: serve's per-token-name budget counts the tokens of every
// meter that shares it, per UTC hour and day, and starts again with the
// next hour.
func TestWindow(t *testing.T) {
	now := time.Date(2026, 1, 2, 10, 59, 0, 0, time.UTC)
	var mu sync.Mutex
	w := &meter.Window{PerHour: 100, PerDay: 150, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	if x := w.Allow(0, 10); x != nil {
		t.Fatalf("refused at once: %v", x)
	}
	w.Spend(60)
	w.Spend(40)
	if x := w.Allow(0, 0); x == nil || x.Window != "hour" || x.Spent != 100 || x.Budget != meter.BudgetToken {
		t.Errorf("after 100 tokens this hour: %+v", x)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if x := w.Allow(0, 10); x != nil {
		t.Errorf("a new hour: %v", x)
	}
	w.Spend(50)
	if x := w.Allow(0, 0); x == nil || x.Window != "day" || x.Spent != 150 {
		t.Errorf("after 150 tokens today: %+v", x)
	}
	if h, d := w.Spent(); h != 50 || d != 150 {
		t.Errorf("spent %d this hour, %d today", h, d)
	}
}
