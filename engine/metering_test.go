package engine

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/gateway/meter/metertest"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
)

const antStream = `{"model":"claude-fake","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func call(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(antStream))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

func spentConversation(tokens int64) *harness.Metered {
	return &harness.Metered{MeteredUsage: harness.MeteredUsage{Requests: 1, Usage: harness.Usage{InputTokens: tokens, Complete: true}}}
}

// TestTurnMeterBudgets: a resumed conversation's budget counts what its
// earlier turns spent; one meter serves the Run and its inner turns; the
// turn ends with code budget and the figures of the budget that refused
// the call, keeping what the turn's own error said; Result.Metered and
// the stored metadata hold the counts.
func TestTurnMeterBudgets(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	e := &turnRun{h: echo.Harness(), red: credentials.NewRedactor(),
		t:      Turn{Resume: "c1"},
		o:      &RunOptions{MaxTokens: 5000, metering: &metering{}},
		parent: conversation.Meta{ID: "c1", Budget: 1000, Metered: spentConversation(900)}}
	m := e.turnMeter([]string{meter.Anthropic})
	inner := &turnRun{h: e.h, red: e.red, o: new(RunOptions)}
	*inner.o = *e.o
	if inner.turnMeter([]string{meter.Anthropic}) != m {
		t.Fatal("an inner turn got a meter of its own")
	}
	base := metertest.Proxy(t, m, ant.URL())
	if s := call(t, base); s != 200 {
		t.Fatalf("first call: %d", s)
	}
	if s := call(t, base); s != 400 {
		t.Fatalf("second call: %d, want the refusal", s)
	}
	if n := len(ant.MessageRequests()); n != 1 {
		t.Errorf("the API received %d calls, want 1", n)
	}
	res := &Result{Usage: harness.Usage{InputTokens: 321, OutputTokens: 45, Complete: true}}
	turnErr := (&outpost.Error{Code: outpost.Quota, Op: "run"}).Detail("spooled", "/x")
	err := e.meterEnd(res, turnErr)
	var oe *outpost.Error
	if !asError(err, &oe) || oe.Code != outpost.Budget || outpost.ExitCode(err) != 11 {
		t.Fatalf("error %v, want code budget", err)
	}
	want := map[string]any{"limit": int64(1000), "spent": int64(1266), "left": int64(0), "estimate": int64(len(antStream) / 4), "budget": "conversation", "spooled": "/x"}
	if diff := cmp.Diff(want, oe.Details); diff != "" {
		t.Errorf("details (-want +got):\n%s", diff)
	}
	if res.Metered == nil || res.Metered.Tokens() != 366 || res.Metered.Requests != 1 {
		t.Errorf("metered %+v", res.Metered)
	}
	meta := e.parent
	e.meterMeta(&meta)
	if meta.Budget != 1000 || meta.Metered.Tokens() != 900+366 || meta.Metered.Requests != 2 {
		t.Errorf("stored budget %d, metered %+v", meta.Budget, meta.Metered)
	}
}

// TestTurnMeterNoBudget: without budgets the meter only counts, and the
// turn's own error stays.
func TestTurnMeterNoBudget(t *testing.T) {
	var notices []harness.Event
	e := &turnRun{h: echo.Harness(), red: credentials.NewRedactor(), o: &RunOptions{OnEvent: func(ev harness.Event) { notices = append(notices, ev) }}}
	if e.meterEnd(&Result{}, nil) != nil || e.meterNow() != nil || len(notices) != 0 {
		t.Fatal("a turn without a meter changed")
	}
	// A budget without a meter cannot be enforced: a notice says so.
	e.o.MaxTokens = 10
	if e.meterEnd(&Result{}, nil) != nil || len(notices) != 1 || notices[0].Kind != "budget" {
		t.Fatalf("notices %+v", notices)
	}
	e.o.MaxTokens = 0
	m := e.turnMeter([]string{meter.Anthropic})
	r, _ := http.NewRequest(http.MethodPost, "http://x/v1/messages", strings.NewReader(strings.Repeat("x", 1<<20)))
	if resp := m.Before(r, 0); resp != nil {
		t.Fatalf("refused without a budget: %d", resp.StatusCode)
	}
	res := &Result{}
	if err := e.meterEnd(res, nil); err != nil || res.Metered == nil {
		t.Errorf("err %v, metered %v", err, res.Metered)
	}
}

// TestCompareUsage: a notice when the CLI's and the gateway's counts
// differ beyond rounding, none within it or when either is incomplete.
func TestCompareUsage(t *testing.T) {
	met := harness.Metered{MeteredUsage: harness.MeteredUsage{Requests: 1, Usage: harness.Usage{InputTokens: 1000, CacheReadTokens: 500, OutputTokens: 200, Complete: true}}}
	for _, tc := range []struct {
		name string
		cli  harness.Usage
		want int
	}{
		{"equal, split otherwise", harness.Usage{InputTokens: 1500, OutputTokens: 200, Complete: true}, 0},
		{"rounding", harness.Usage{InputTokens: 1510, OutputTokens: 201, Complete: true}, 0},
		{"differ", harness.Usage{InputTokens: 700, OutputTokens: 200, Complete: true}, 1},
		{"incomplete", harness.Usage{InputTokens: 7}, 0},
	} {
		var got []harness.Event
		e := &turnRun{h: echo.Harness(), red: credentials.NewRedactor(), o: &RunOptions{OnEvent: func(ev harness.Event) { got = append(got, ev) }}}
		e.compareUsage(tc.cli, met)
		if len(got) != tc.want || (tc.want == 1 && got[0].Kind != "metered") {
			t.Errorf("%s: %d notices %+v", tc.name, len(got), got)
		}
	}
}

func asError(err error, oe **outpost.Error) bool { return errors.As(err, oe) }

// TestMeterUsage: a preset whose CLI reports no usage gets the gateway's
// count as its usage; one that reports usage keeps its own.
func TestMeterUsage(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	h := *echo.Harness()
	h.Usage = harness.UsageUnavailable
	e := &turnRun{h: &h, red: credentials.NewRedactor(), o: &RunOptions{}}
	call(t, metertest.Proxy(t, e.turnMeter([]string{meter.Anthropic}), ant.URL()))
	res := &Result{}
	e.meterUsage(res)
	if want := (harness.Usage{InputTokens: 321, OutputTokens: 45, Complete: true}); res.Usage != want {
		t.Errorf("usage %+v, want %+v", res.Usage, want)
	}
	e.h = echo.Harness()
	own := harness.Usage{InputTokens: 1, Complete: true}
	res = &Result{Usage: own}
	e.meterUsage(res)
	if res.Usage != own {
		t.Errorf("usage %+v, want the CLI's", res.Usage)
	}
}

// TestRefusedTurnNotStored: a turn whose every model call a budget
// refused (none reached the API) is no turn of the conversation: nothing
// is captured or stored, and a resumed conversation, as it was, is the
// result's to continue. A turn that made a call before the refusal is
// one.
func TestRefusedTurnNotStored(t *testing.T) {
	ant := anthropic.New(t, anthropic.Options{Usage: anthropic.Usage{InputTokens: 321, OutputTokens: 45}})
	e := &turnRun{h: echo.Harness(), red: credentials.NewRedactor(),
		t:      Turn{Resume: "c1"},
		o:      &RunOptions{Store: conversation.NewFS(t.TempDir()), metering: &metering{}},
		parent: conversation.Meta{ID: "c1", Turns: 3, Budget: 1000, Metered: spentConversation(1000)}}
	base := metertest.Proxy(t, e.turnMeter([]string{meter.Anthropic}), ant.URL())
	if s := call(t, base); s != 400 {
		t.Fatalf("call: %d, want the refusal", s)
	}
	if !e.refusedTurn() {
		t.Fatal("a turn of refused calls only is not a refused turn")
	}
	res := &Result{}
	turnErr := outpost.New(outpost.Process, "run", "the agent gave up")
	err := e.captureStep(t.Context(), nil, res, &stream{native: "session-1"}, turnErr)
	if err != turnErr || e.put != nil || e.stored != "" {
		t.Errorf("error %v, put %v, stored %q: want the turn's error, nothing stored", err, e.put != nil, e.stored)
	}
	if res.Conversation != "c1" {
		t.Errorf("conversation %q, want the resumed c1, as it was", res.Conversation)
	}
	if ids, _ := e.o.Store.List(t.Context()); len(ids) != 0 {
		t.Errorf("stored %v", ids)
	}

	// One call through, then a refusal: a turn.
	e2 := &turnRun{h: echo.Harness(), red: credentials.NewRedactor(), o: &RunOptions{MaxTokens: 100, metering: &metering{}}}
	base2 := metertest.Proxy(t, e2.turnMeter([]string{meter.Anthropic}), ant.URL())
	if s := call(t, base2); s != 200 {
		t.Fatalf("first call: %d", s)
	}
	if s := call(t, base2); s != 400 {
		t.Fatalf("second call: %d, want the refusal", s)
	}
	if e2.refusedTurn() {
		t.Error("a turn that reached the API is taken for a refused one")
	}
}
