package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/server"
)

// BenchmarkConsole measures, in the test browser, how long the turns page
// and the conversations page take to show (from the change of page to the
// table built, the API call included) with 1,000 stored conversations and
// 50 running turns, and how long a running turn's events take from the
// server (the event's time, set as the server reads it from the agent)
// to the browser's page (docs/benchmarks.md). Not asserted.
//
//	go test -run '^$' -bench Console -benchtime 10x ./server/ui/
func BenchmarkConsole(b *testing.B) {
	if browser == nil {
		b.Skipf("no browser: %s", browserSkip)
	}
	f, err := newFixture(func(o *server.Options) { o.MaxConcurrent, o.MaxQueue, o.PoolSize = 64, 64, -1 })
	if err != nil {
		b.Fatal(err)
	}
	defer f.closer()
	ctx := context.Background()
	for i := range 1000 {
		m := conversation.Meta{ID: conversation.NewID(), Agent: "echo", Owner: "token:alice", Sandbox: "local", Model: "echo-1",
			Created: time.Now(), Updated: time.Now(), Turns: 1 + i%5, Usage: harness.Usage{InputTokens: int64(i), OutputTokens: 10}}
		if err := f.store.Put(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
	}
	var running []string
	for range 50 {
		running = append(running, f.startTurn(b, map[string]any{"prompt": "#slow=100000 busy"}).ID)
	}
	defer func() {
		for _, id := range running {
			f.api(b, f.alice, "POST", "/v1/turns/"+id+"/cancel", nil, nil)
		}
	}()
	tb := openTab(b, f)
	tb.signIn(f.alice)
	tb.waitText("main h1", "Turns")
	var turnsMS, convMS []float64
	b.ResetTimer()
	for range b.N {
		tb.open("#/conversations")
		convMS = append(convMS, eval[float64](tb, `window.__outpostRenderMS`))
		tb.open("#/turns")
		if n := eval[int](tb, `document.querySelectorAll('tr[data-turn]').length`); n < 50 {
			b.Fatalf("%d turns listed, want the 50 running", n)
		}
		turnsMS = append(turnsMS, eval[float64](tb, `window.__outpostRenderMS`))
	}
	b.StopTimer()
	// The API calls alone, from Go: what the pages' figures include.
	start := time.Now()
	f.api(b, f.alice, "GET", "/v1/conversations", nil, nil)
	convAPI := time.Since(start)
	start = time.Now()
	f.api(b, f.alice, "GET", "/v1/turns?limit=200", nil, nil)
	turnsAPI := time.Since(start)
	// Latency under the 50 turns' load (1,000 deltas a second), then of
	// one turn alone.
	loaded := followLatency(tb, running[0], 60)
	loadedGo := f.streamLatency(b, running[1], 50)
	for _, id := range running[1:] {
		f.api(b, f.alice, "POST", "/v1/turns/"+id+"/cancel", nil, nil)
	}
	alone := followLatency(tb, f.startTurn(b, map[string]any{"prompt": "#slow=100000 alone"}).ID, 60)
	b.ReportMetric(median(turnsMS), "turns-page-ms")
	b.ReportMetric(float64(turnsAPI.Microseconds())/1000, "turns-api-ms")
	b.ReportMetric(median(convMS), "conversations-page-ms")
	b.ReportMetric(float64(convAPI.Microseconds())/1000, "conversations-api-ms")
	b.ReportMetric(median(loaded), "event-latency-50-turns-ms")
	b.ReportMetric(median(loadedGo), "event-latency-50-turns-go-client-ms")
	b.ReportMetric(median(alone), "event-latency-ms")
	b.ReportMetric(pct(alone, 95), "event-latency-p95-ms")
}

// followLatency opens a running turn's page and returns the latencies of
// n events that arrived live (after those replayed when it opened).
func followLatency(tb *tab, id string, n int) []float64 {
	var st server.TurnStatus
	tb.f.api(tb.t, tb.f.alice, "GET", "/v1/turns/"+id, nil, &st)
	tb.open("#/turns/" + id)
	last := fmt.Sprint(st.Events + int64(n))
	tb.until("live events", `(() => { const l = window.__outpostLatency || []; return l.length > 0 && l[l.length - 1][0] > `+last+`; })()`, "document")
	return eval[[]float64](tb, `window.__outpostLatency.filter(([seq]) => seq > `+fmt.Sprint(st.Events)+`).map(([, ms]) => ms)`)
}

// streamLatency reads n events of a running turn's stream from Go and
// returns each one's latency from its time to its arrival: the server's
// part of followLatency's figure.
func (f *fixture) streamLatency(tb testing.TB, id string, n int) []float64 {
	var st server.TurnStatus
	f.api(tb, f.alice, "GET", "/v1/turns/"+id, nil, &st)
	req, _ := http.NewRequest("GET", f.url+"/v1/turns/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.alice)
	req.Header.Set("Last-Event-ID", fmt.Sprint(st.Events))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var out []float64
	sc := bufio.NewScanner(resp.Body)
	for len(out) < n && sc.Scan() {
		var ev harness.Event
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &ev) == nil && !ev.Time.IsZero() {
			out = append(out, float64(time.Since(ev.Time).Microseconds())/1000)
		}
	}
	return out
}

func median(v []float64) float64 { return pct(v, 50) }

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
