package engine_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
)

// BenchmarkEchoTurn compares a whole echo turn through outpost (lease a
// private home, resolve variables, run and decode, capture the
// conversation into the store, release) with the same echo agent run
// directly. scripts/bench.sh reports the ratio. The agent is the
// in-sandbox binary (cmd/outpost-sandbox) on every side, as beside an
// installed outpost: this test binary, linking the docker provider
// through the examples, takes about 50 ms to start, which would hide the
// milliseconds that are outpost's own.
func BenchmarkEchoTurn(b *testing.B) {
	self := testenv.SandboxBinary(b)
	inst := &bootstrap.Installer{Self: self}
	b.Run("direct", func(b *testing.B) {
		home := b.TempDir()
		for b.Loop() {
			cmd := exec.Command(self, echo.Subcommand, "--", "hello")
			cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, out)
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("outpost", func(b *testing.B) {
		p := local.New(&local.Options{BaseDir: b.TempDir(), Isolation: "none"})
		store := conversation.NewFS(b.TempDir())
		wd := b.TempDir()
		h := echo.Harness()
		events := 0
		o := &engine.RunOptions{Provider: p, Store: store, Installer: inst, Environ: []string{"PATH=" + os.Getenv("PATH")},
			OnEvent: func(harness.Event) { events++ }}
		for b.Loop() {
			if _, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: "hello", Workdir: wd}, o); err != nil {
				b.Fatal(err)
			}
		}
		if events == 0 {
			b.Fatal("no events")
		}
	})
	// The same turn without its workspace checkpoint (--checkpoint off):
	// what recording the workspace costs an echo turn.
	b.Run("outpost-no-checkpoint", func(b *testing.B) {
		p := local.New(&local.Options{BaseDir: b.TempDir(), Isolation: "none"})
		o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Installer: inst, Environ: []string{"PATH=" + os.Getenv("PATH")},
			Checkpoint: engine.CheckpointOff}
		wd := b.TempDir()
		for b.Loop() {
			if _, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same turn on a lease held across turns, as an orchestrator
	// running several turns in one sandbox does: no home to make or remove.
	b.Run("outpost-held-lease", func(b *testing.B) {
		p := local.New(&local.Options{BaseDir: b.TempDir(), Isolation: "none"})
		lease, err := sandbox.Acquire(context.Background(), p, driver.Options{Workdir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer lease.Close(context.Background())
		o := &engine.RunOptions{Lease: lease, Store: conversation.NewFS(b.TempDir()), Installer: inst, Environ: []string{"PATH=" + os.Getenv("PATH")}}
		for b.Loop() {
			if _, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello"}, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A fresh home for the agent run directly: what isolation costs
	// without outpost.
	b.Run("direct-fresh-home", func(b *testing.B) {
		base := b.TempDir()
		for b.Loop() {
			home, err := os.MkdirTemp(base, "home-")
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(self, echo.Subcommand, "--", "hello")
			cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, out)
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(home)
		}
	})
}

// BenchmarkEchoTurnIsolation: the echo turn of BenchmarkEchoTurn on the
// local sandbox with isolation=none ("direct", the ratio's base) and in
// bubblewrap's namespaces: what isolation costs a turn (a bwrap per
// process; with egress gateway, the default where it is enforced, a
// network namespace and the forwarder in front of the agent). The lease's
// root is short, for the tunnels' sockets.
func BenchmarkEchoTurnIsolation(b *testing.B) {
	inst := &bootstrap.Installer{Self: testenv.SandboxBinary(b)}
	for _, mode := range []string{"direct", "namespaces"} {
		b.Run(mode, func(b *testing.B) {
			iso := mode
			if mode == "direct" {
				iso = "none"
			} else if i, err := local.New(&local.Options{Isolation: iso}).Isolation(); err != nil || !i.Active {
				b.Skipf("bubblewrap isolation is not available here: %v", err)
			}
			root, err := os.MkdirTemp("", "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(root)
			p := local.New(&local.Options{BaseDir: root, Isolation: iso})
			o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Installer: inst, Environ: []string{"PATH=" + os.Getenv("PATH")}}
			wd := b.TempDir()
			for b.Loop() {
				if _, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRace: a race of three echo contestants on local (the starting
// tree recorded once, materialised three times, three turns at once, a
// check in each, the winner picked) against one echo turn with its
// checkpoint, as issue #41 names it; scripts/bench.sh reports the ratio.
// The workspace holds a few files, as a small repository's would.
func BenchmarkRace(b *testing.B) {
	self := testenv.SandboxBinary(b)
	inst := &bootstrap.Installer{Self: self}
	b.Setenv("OUTPOST_HOME", b.TempDir())
	wd := b.TempDir()
	for i := range 20 {
		os.WriteFile(filepath.Join(wd, fmt.Sprintf("f%d.go", i)), []byte("package x\n"), 0o644)
	}
	agent := harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}
	opts := func(b *testing.B) engine.RunOptions {
		return engine.RunOptions{Provider: local.New(&local.Options{BaseDir: b.TempDir(), Isolation: "none"}), Store: conversation.NewFS(b.TempDir()),
			Installer: inst, Environ: []string{"PATH=" + os.Getenv("PATH")}}
	}
	b.Run("direct", func(b *testing.B) {
		o := opts(b)
		for b.Loop() {
			if _, err := engine.Run(context.Background(), engine.Turn{Agent: agent, Prompt: "#write=out.txt go", Workdir: wd}, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("race3", func(b *testing.B) {
		o := opts(b)
		for b.Loop() {
			res, err := engine.Race(context.Background(), engine.RaceSpec{Prompt: "#write=out.txt go", Workdir: wd,
				Contestants: []harness.Agent{agent, agent, agent}}, &engine.RaceOptions{Run: o})
			if err != nil || res.Winner < 0 {
				for _, c := range res.Contestants {
					b.Log(c.Code, c.Err)
				}
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
}
