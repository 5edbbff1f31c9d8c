package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/providers/local"
)

// BenchmarkEchoTurnStore is a whole echo turn (engine.Run on the local
// provider) with each store: "new" starts a conversation, "resume"
// continues one (hold, read, restore, run, capture, mask, compare-and-swap
// store, release). docs/benchmarks.md ("Stores") has the figures; run with
// OUTPOST_PGTEST_FSYNC=on.
func BenchmarkEchoTurnStore(b *testing.B) {
	stores := map[string]func(b *testing.B) conversation.Store{
		"fs": func(b *testing.B) conversation.Store { return conversation.NewFS(filepath.Join(b.TempDir(), "store")) },
		"postgres": func(b *testing.B) conversation.Store {
			s, err := postgres.Open(context.Background(), pgtest.NewDB(b), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			return s
		},
	}
	for _, name := range []string{"fs", "postgres"} {
		for _, mode := range []string{"new", "resume"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				store := stores[name](b)
				o := &engine.RunOptions{Provider: local.New(&local.Options{BaseDir: b.TempDir()}), Store: store,
					Environ: []string{"PATH=" + os.Getenv("PATH")}}
				turn := engine.Turn{Agent: harness.Agent{Harness: echo.Harness()}, Prompt: "hello", Workdir: b.TempDir()}
				if mode == "resume" {
					res, err := engine.Run(context.Background(), turn, o)
					if err != nil {
						b.Fatal(err)
					}
					turn.Resume = res.Conversation
				}
				for b.Loop() {
					if _, err := engine.Run(context.Background(), turn, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
