package presets

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/gemini"
	fakegemini "github.com/outposthq/outpost/internal/fakeapi/gemini"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkACPTurn (docs/benchmarks.md, "ACP presets against their JSONL
// presets"): one "Say hello" turn of the same CLI against its fake API,
// through its JSONL preset and through its ACP preset, alternating within
// each iteration (so a change of the machine's load falls on both), each
// on a new local lease. Reported: each way's median turn and median time
// to the first message event, in ms, and the median of the per-iteration
// ratios ACP / JSONL of both.
//
//	go test ./integration/presets -run '^$' -bench BenchmarkACPTurn -benchtime 4x -v
func BenchmarkACPTurn(b *testing.B) {
	b.Run("gemini", func(b *testing.B) {
		fake := fakegemini.Start(b, fakegemini.Config{})
		bin := filepath.Dir(testenv.RequireCLI(b, "gemini"))
		vars := []string{"GEMINI_API_KEY=bench-key", "GOOGLE_GEMINI_BASE_URL=" + fake.URL()}
		pairedACP(b, bin, vars, geminiModel, gemini.Harness(), gemini.ACP())
	})
	b.Run("copilot", func(b *testing.B) {
		// The same native binary both ways (copilot --acp is a mode of
		// the CLI, not an adapter): the fairest of the pairs.
		fake := openai.Start(b, openai.Config{})
		shim := testenv.RequireCLI(b, "copilot")
		dir := b.TempDir()
		if err := os.Symlink(filepath.Join(filepath.Dir(filepath.Dir(shim)), "@github", "copilot-linux-x64", "copilot"), filepath.Join(dir, "copilot")); err != nil {
			b.Fatal(err)
		}
		vars := []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + fake.URL(), "COPILOT_PROVIDER_API_KEY=bench-key", "COPILOT_MODEL=" + oaiModel,
			"COPILOT_PKG_CACHE_HOME=" + filepath.Join(testenv.Cache(), "copilot-pkg")}
		pairedACP(b, dir, vars, "", copilot.Harness(), copilot.ACP())
	})
	b.Run("opencode", func(b *testing.B) {
		fake := openai.Start(b, openai.Config{})
		bin := filepath.Dir(testenv.RequireCLI(b, "opencode"))
		vars := []string{"OPENAI_BASE_URL=" + fake.URL(), "OPENAI_API_KEY=sk-bench", "OPENAI_MODEL=" + oaiModel}
		pairedACP(b, bin, vars, "", declarative.OpenCode(), declarative.OpenCodeACP())
	})
}

func pairedACP(b *testing.B, bin string, vars []string, model string, jsonl, acp *harness.Harness) {
	store := conversation.NewFS(b.TempDir())
	turn := func(h *harness.Harness) (wall, first time.Duration) {
		prov := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}})
		var once sync.Once
		start := time.Now()
		_, err := engine.Run(context.Background(), engine.Turn{Prompt: "Say hello", Workdir: b.TempDir(), Timeout: 5 * time.Minute,
			Agent: harness.Agent{Kind: harness.KindCLI, Harness: h, Model: model}}, &engine.RunOptions{Provider: prov, Store: store, Environ: vars,
			OnEvent: func(ev harness.Event) {
				if ev.Type == harness.EventMessage {
					once.Do(func() { first = time.Since(start) })
				}
			}})
		if err != nil {
			b.Fatalf("%s: %v", h.Name, err)
		}
		return time.Since(start), first
	}
	turn(jsonl) // untimed: the CLI's first-run set-up and cold caches
	turn(acp)
	var jw, jf, aw, af, rw, rf []float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w1, f1 := turn(jsonl)
		w2, f2 := turn(acp)
		jw, jf, aw, af = append(jw, ms(w1)), append(jf, ms(f1)), append(aw, ms(w2)), append(af, ms(f2))
		rw, rf = append(rw, ms(w2)/ms(w1)), append(rf, ms(f2)/ms(f1))
		b.Logf("#%d jsonl %.0f ms (first message %.0f), acp %.0f ms (first message %.0f)", i, ms(w1), ms(f1), ms(w2), ms(f2))
	}
	median := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(median(jw), "jsonl-ms")
	b.ReportMetric(median(aw), "acp-ms")
	b.ReportMetric(median(jf), "jsonl-first-ms")
	b.ReportMetric(median(af), "acp-first-ms")
	b.ReportMetric(median(rw), "acp/jsonl-wall")
	b.ReportMetric(median(rf), "acp/jsonl-first")
}
