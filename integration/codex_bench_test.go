package integration

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkCodexTurn compares one Codex turn through outpost (lease a
// private home, apply the configuration, run and decode, read the usage
// and capture the rollout into the store, release) with the same `codex
// exec` invocation run directly — the arguments codex.Request builds and
// the config.toml codex.Configuration writes, in a fresh CODEX_HOME —
// against the same fake model API. scripts/bench.sh reports the ratio
// (docs/benchmarks.md, "Codex").
func BenchmarkCodexTurn(b *testing.B) {
	bin := testenv.RequireCLI(b, "codex")
	fake := openai.Start(b, openai.Config{})
	vars := harness.Vars{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": codexKey}
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	const prompt = "Say hello"

	b.Run("direct", func(b *testing.B) {
		conf, err := codex.Configuration(vars)
		if err != nil {
			b.Fatal(err)
		}
		wd := b.TempDir()
		for b.Loop() {
			home := b.TempDir()
			cmd, err := codex.Request(harness.Input{Prompt: prompt, Model: codexModel, Workdir: wd, Home: home})
			if err != nil {
				b.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(home, codex.HomeDir), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(home, conf.Files[0].Path), conf.Files[0].Content, 0o600); err != nil {
				b.Fatal(err)
			}
			c := exec.Command(bin, cmd.Args...)
			c.Dir = wd
			c.Env = []string{"PATH=" + path, "HOME=" + home, "CODEX_HOME=" + cmd.Env["CODEX_HOME"], "OPENAI_API_KEY=" + codexKey}
			out, _ := c.StdoutPipe()
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, out)
			if err := c.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("outpost", func(b *testing.B) {
		p := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + path}})
		store := conversation.NewFS(b.TempDir())
		wd := b.TempDir()
		o := &engine.RunOptions{Provider: p, Store: store, Environ: []string{"OPENAI_BASE_URL=" + fake.URL(), "OPENAI_API_KEY=" + codexKey}}
		turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: codex.Harness(), Model: codexModel}, Prompt: prompt, Workdir: wd}
		for b.Loop() {
			res, err := engine.Run(context.Background(), turn, o)
			if err != nil {
				b.Fatal(err)
			}
			if res.Text != openai.DefaultText || res.Conversation == "" {
				b.Fatalf("result %+v", res)
			}
		}
	})
}
