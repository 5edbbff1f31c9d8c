package integration

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkGatewayClaudeTurn measures what the credential gateway adds to
// a real claude turn on the local sandbox, against the same turn with
// --secrets env (the key in the sandbox: the anchor the issue names).
// Each iteration runs one turn of each, in alternating order, so that a
// change of the machine's load falls on both; it reports the median of
// the per-pair ratios, for the whole turn (turn-ratio) and to the first
// message event (first-token-ratio), beside the medians of each mode
// (ms). The gateway turns share the process's gateway, as every turn
// without a caller's does (docs/benchmarks.md, "Credential gateway").
func BenchmarkGatewayClaudeTurn(b *testing.B) {
	bin := testenv.RequireCLI(b, "claude")
	srv := anthropic.New(b, anthropic.Options{})
	path := filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin"
	p := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + path}})
	store := conversation.NewFS(b.TempDir())
	wd := b.TempDir()
	h := claude.Harness()
	// turn runs one turn in secrets mode and returns its duration and its
	// time to the first message event.
	turn := func(secrets string) (whole, first time.Duration) {
		var once sync.Once
		start := time.Now()
		o := &engine.RunOptions{Provider: p, Store: store, Secrets: secrets,
			Environ: []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=sk-fake"},
			OnEvent: func(ev harness.Event) {
				if ev.Type == harness.EventMessage {
					once.Do(func() { first = time.Since(start) })
				}
			}}
		res, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "say hi", Workdir: wd}, o)
		if err != nil || res.Text != anthropic.DefaultText || res.Secrets != secrets {
			b.Fatalf("turn: %v %+v", err, res)
		}
		return time.Since(start), first
	}
	var env, gw, envFirst, gwFirst, ratio, firstRatio []float64
	i := 0
	for b.Loop() {
		var e, g, ef, gf time.Duration
		if i%2 == 0 {
			e, ef = turn(engine.SecretsEnv)
			g, gf = turn(engine.SecretsGateway)
		} else {
			g, gf = turn(engine.SecretsGateway)
			e, ef = turn(engine.SecretsEnv)
		}
		i++
		env, gw = append(env, ms(e)), append(gw, ms(g))
		envFirst, gwFirst = append(envFirst, ms(ef)), append(gwFirst, ms(gf))
		ratio, firstRatio = append(ratio, ms(g)/ms(e)), append(firstRatio, ms(gf)/ms(ef))
	}
	b.ReportMetric(median(ratio), "turn-ratio")
	b.ReportMetric(median(firstRatio), "first-token-ratio")
	b.ReportMetric(median(env), "env-ms")
	b.ReportMetric(median(gw), "gateway-ms")
	b.ReportMetric(median(envFirst), "env-first-ms")
	b.ReportMetric(median(gwFirst), "gateway-first-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var median = testenv.Median
