package engine_test

import (
	"context"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// A turn on a pooled lease runs like any other, and its sandbox carries
// nothing into the next one.
func TestPoolTurn(t *testing.T) {
	prov := local.New(&local.Options{BaseDir: t.TempDir()})
	p := sandbox.NewPool(&sandbox.PoolOptions{
		Size:      1,
		Open:      func(string, map[string]string) (driver.Provider, error) { return prov, nil },
		Bootstrap: []*harness.Harness{echo.Harness()},
	})
	defer p.Close(context.Background())
	ctx := context.Background()
	key := sandbox.PoolKey{Provider: "local", Workdir: t.TempDir()}
	homes := map[string]bool{}
	for range 3 {
		l, err := p.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if homes[l.Home()] {
			t.Fatalf("home %s served two turns", l.Home())
		}
		homes[l.Home()] = true
		res, err := engine.Run(ctx, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: echo.Harness()}, Prompt: "hello", Workdir: key.Workdir}, &engine.RunOptions{Lease: l, Environ: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Text == "" {
			t.Errorf("empty answer: %+v", res)
		}
		p.Release(key, l)
	}
}
