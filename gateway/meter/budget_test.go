package meter_test

import (
	"encoding/json"
	"fmt"
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
	want := &meter.Exceeded{Budget: meter.BudgetTurn, Limit: 500, Spent: 732, Estimate: int64(len(antStream) / 4)}
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
	if !strings.HasPrefix(e.Error.Message, meter.RefusalPrefix) || strings.Contains(strings.ToLower(e.Error.Message), "credit balance is too low") {
		t.Errorf("refusal %q: want outpost's budget named, not the account's balance", e.Error.Message)
	}
	oe := m.Exceeded().Err("run", "claude")
	if outpost.ExitCode(oe) != 11 || oe.Details["budget"] != "turn" || oe.Details["limit"] != int64(500) || oe.Details["spent"] != int64(732) || oe.Details["left"] != int64(0) {
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
	x := m.Exceeded()
	if x == nil || x.Budget != meter.BudgetConversation || x.Spent != 900 || x.Left() != 100 || x.Estimate <= 100 {
		t.Fatalf("exceeded %+v", x)
	}
	// What the refusal says agrees with `outpost usage` (100 left) and
	// says why: the next call needs more.
	if want := fmt.Sprintf("the conversation budget of 1000 tokens has 100 tokens left (900 used), fewer than the next model call's prompt needs (about %d tokens)", x.Estimate); x.Error() != want {
		t.Errorf("message %q, want %q", x.Error(), want)
	}
}

// TestExceededMessage: a budget's refusal says what `outpost usage` says
// is left, and why the call was refused: spent, or the call's prompt is
// larger than what is left. The details carry the same figures.
func TestExceededMessage(t *testing.T) {
	for _, tc := range []struct {
		x    meter.Exceeded
		want string
		left int64
	}{
		{meter.Exceeded{Budget: "conversation", Limit: 30, Spent: 19, Estimate: 25}, "the conversation budget of 30 tokens has 11 tokens left (19 used), fewer than the next model call's prompt needs (about 25 tokens)", 11},
		{meter.Exceeded{Budget: "turn", Limit: 30, Spent: 30, Estimate: 25}, "the turn budget of 30 tokens is spent (30 tokens used)", 0},
		{meter.Exceeded{Budget: "turn", Limit: 30, Spent: 45}, "the turn budget of 30 tokens is spent (45 tokens used)", 0},
		{meter.Exceeded{Budget: "token", Limit: 100, Spent: 90, Estimate: 20, Window: "hour"}, "the token budget of 100 tokens per hour has 10 tokens left (90 used), fewer than the next model call's prompt needs (about 20 tokens)", 10},
	} {
		x := tc.x
		if got := x.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", x, got, tc.want)
		}
		oe := x.Err("run", "claude")
		if oe.Details["left"] != tc.left || oe.Details["spent"] != x.Spent || oe.Details["estimate"] != x.Estimate {
			t.Errorf("%+v: details %v", x, oe.Details)
		}
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
		{meter.Anthropic, 400, `"message":"outpost budget: the turn budget`},
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
		if !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), meter.RefusalPrefix) {
			t.Errorf("%s: %s lacks %s or %q", tc.api, b, tc.want, meter.RefusalPrefix)
		}
		if strings.Contains(strings.ToLower(string(b)), "credit balance") {
			t.Errorf("%s: %s reads as the account's balance", tc.api, b)
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
