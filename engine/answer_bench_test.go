package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkAnswerTurn measures what structured answers cost an echo turn:
// "plain" is a turn with changed files off (the anchor), "changed-files"
// the default (two snapshots of a workspace of 5000 files), "schema" a
// turn whose answer is extracted and validated as well. scripts/bench.sh
// reports the ratios to plain.
func BenchmarkAnswerTurn(b *testing.B) {
	wd := b.TempDir()
	for i := 0; i < 5000; i++ {
		p := filepath.Join(wd, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%04d.go", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, t engine.Turn) {
		p := local.New(&local.Options{BaseDir: b.TempDir()})
		o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Environ: []string{"PATH=" + os.Getenv("PATH")}}
		t.Agent, t.Workdir = harness.Agent{Harness: echo.Harness()}, wd
		for b.Loop() {
			if _, err := engine.Run(context.Background(), t, o); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, engine.Turn{Prompt: "hello", ChangedFilesLimit: -1}) })
	b.Run("changed-files", func(b *testing.B) { run(b, engine.Turn{Prompt: "hello"}) })
	b.Run("schema", func(b *testing.B) {
		run(b, engine.Turn{Prompt: `#json={"name": "x"}`, ChangedFilesLimit: -1,
			Output: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)})
	})
}
