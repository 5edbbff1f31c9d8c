package presets

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
)

// BenchmarkOpenAICLITurn compares one turn of Qwen Code and of OpenCode
// through outpost (local provider: lease a private home, write the
// preset's configuration, run and decode, capture the conversation into
// the store, release) with the same command run directly — the arguments
// and files the preset builds, in a fresh home — against the same fake
// Chat Completions API (docs/benchmarks.md, "Qwen Code and OpenCode").
func BenchmarkOpenAICLITurn(b *testing.B) {
	for _, c := range []struct {
		name string
		h    *harness.Harness
	}{{"qwen", declarative.Qwen()}, {"opencode", declarative.OpenCode()}} {
		b.Run(c.name, func(b *testing.B) {
			bin := testenv.RequireCLI(b, c.name)
			fake := openai.Start(b, openai.Config{})
			vars := map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-bench", "OPENAI_MODEL": oaiModel}
			path := filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin"
			b.Run("direct", func(b *testing.B) { benchDirect(b, c.h, bin, path, vars) })
			b.Run("outpost", func(b *testing.B) { benchOutpost(b, c.h, path, vars) })
		})
	}
}

func benchDirect(b *testing.B, h *harness.Harness, bin, path string, vars map[string]string) {
	wd := b.TempDir()
	conf, err := h.Configuration(harness.Vars(vars))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		home := b.TempDir()
		cmd, err := h.Request(harness.Input{Prompt: "Say hello", Workdir: wd, Home: home})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range conf.Files {
			p := filepath.Join(home, f.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, f.Content, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		c := exec.Command(bin, cmd.Args...)
		c.Dir, c.Stdin = wd, bytes.NewReader(cmd.Stdin)
		c.Env = []string{"PATH=" + path, "HOME=" + home, "LANG=C.UTF-8"}
		for k, v := range vars {
			c.Env = append(c.Env, k+"="+v)
		}
		for k, v := range cmd.Env {
			c.Env = append(c.Env, k+"="+v)
		}
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		got, _ := io.ReadAll(out)
		if err := c.Wait(); err != nil || !strings.Contains(string(got), openai.DefaultText) {
			b.Fatalf("%v\n%s", err, got)
		}
	}
}

func benchOutpost(b *testing.B, h *harness.Harness, path string, vars map[string]string) {
	prov := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + path, "LANG=C.UTF-8"}})
	store := conversation.NewFS(b.TempDir())
	environ := []string{"HOME=" + b.TempDir()}
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	wd := b.TempDir()
	for b.Loop() {
		res, err := sandbox.Run(context.Background(), sandbox.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "Say hello", Workdir: wd},
			&sandbox.RunOptions{Provider: prov, Store: store, Environ: environ})
		if err != nil || res.Text != openai.DefaultText {
			b.Fatalf("%v %+v", err, res)
		}
	}
}
