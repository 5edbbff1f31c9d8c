package integration

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
)

// BenchmarkGatewayClaudeTurn measures what the credential gateway adds to
// a real claude turn on the local sandbox: "direct" runs it with
// --secrets env (the key in the sandbox, the anchor the gateway is
// compared with), "gateway" with the default secrets mode (a token in the
// sandbox, the key at the gateway). The gateway turns share the
// process's gateway, as every turn without a caller's does; both report
// the time to the first message event (first-token-ns) beside the whole
// turn (ns/op) (docs/benchmarks.md, "Credential gateway").
func BenchmarkGatewayClaudeTurn(b *testing.B) {
	bin := testenv.RequireCLI(b, "claude")
	srv := anthropic.New(b, anthropic.Options{})
	path := filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin"
	for _, mode := range []struct{ name, secrets string }{{"direct", sandbox.SecretsEnv}, {"gateway", sandbox.SecretsGateway}} {
		b.Run(mode.name, func(b *testing.B) {
			p := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + path}})
			store := conversation.NewFS(b.TempDir())
			wd := b.TempDir()
			var mu sync.Mutex
			var start, first time.Time
			var firstTotal time.Duration
			o := &sandbox.RunOptions{Provider: p, Store: store, Secrets: mode.secrets,
				Environ: []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=sk-fake"},
				OnEvent: func(ev harness.Event) {
					mu.Lock()
					defer mu.Unlock()
					if ev.Type == harness.EventMessage && first.IsZero() {
						first = time.Now()
					}
				}}
			h := claude.Harness()
			for b.Loop() {
				mu.Lock()
				start, first = time.Now(), time.Time{}
				mu.Unlock()
				res, err := sandbox.Run(context.Background(), sandbox.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "say hi", Workdir: wd}, o)
				if err != nil || res.Text != anthropic.DefaultText || res.Secrets != mode.secrets {
					b.Fatalf("turn: %v %+v", err, res)
				}
				mu.Lock()
				firstTotal += first.Sub(start)
				mu.Unlock()
			}
			b.ReportMetric(float64(firstTotal.Nanoseconds())/float64(b.N), "first-token-ns")
		})
	}
}
