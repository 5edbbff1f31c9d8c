package integration

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
)

// Figures from these benchmarks are in docs/benchmarks.md ("Docker"):
//
//	PKGS=./integration BENCHTIME=20x COUNT=5 scripts/bench.sh BenchmarkDocker

func benchProvider(b *testing.B) *docker.Provider {
	b.Helper()
	dockertest.Require(b, dockertest.Busybox)
	p, err := docker.New(&docker.Options{Image: dockertest.Busybox, Binary: dockertest.Binary(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// rawRun is `docker run --rm` of the echo agent in the busybox image, the
// in-sandbox binary bind-mounted as outpost mounts it.
func rawRun(b *testing.B) *exec.Cmd {
	return exec.Command("docker", "run", "--rm", "--user", "1000:1000", "-e", "HOME=/tmp",
		"-v", dockertest.Binary(b)+":"+layout.BinaryPath+":ro", dockertest.Busybox, layout.BinaryPath, echo.Subcommand, "--", "hello")
}

// BenchmarkDockerFirstByte measures a new lease (a container made,
// prepared and started) until the first byte the echo agent prints inside
// it, against `docker run` of the same agent until its first byte.
// Releasing the lease (and the rest of the run) is not counted.
func BenchmarkDockerFirstByte(b *testing.B) {
	p := benchProvider(b)
	wd := b.TempDir()
	ctx := context.Background()
	buf := make([]byte, 1)
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := rawRun(b)
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(out, buf); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			io.Copy(io.Discard, out)
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("outpost", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: wd})
			if err != nil {
				b.Fatal(err)
			}
			env := l.Environment()
			pr, err := l.Start(ctx, driver.ExecRequest{Path: layout.BinaryPath, Args: []string{echo.Subcommand, "--", "hello"}, Env: map[string]string{"HOME": env.Fixed["HOME"], "PATH": env.Defaults["PATH"]}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(pr.Stdout(), buf); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			go io.Copy(io.Discard, pr.Stderr())
			io.Copy(io.Discard, pr.Stdout())
			if st, err := pr.Wait(); err != nil || !st.Success() {
				b.Fatalf("agent: %+v %v", st, err)
			}
			pr.Close()
			if err := l.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// BenchmarkDockerTurn compares a whole echo turn through outpost on
// docker — a container leased, the agent run and decoded, the
// conversation captured, the workspace copied back, the container
// removed — and a turn on a lease held across turns (no container made),
// with a raw `docker run --rm` of the same agent in the same image
// ("direct").
func BenchmarkDockerTurn(b *testing.B) {
	p := benchProvider(b)
	wd := b.TempDir()
	ctx := context.Background()
	turn := engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}
	b.Run("outpost", func(b *testing.B) {
		o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Environ: []string{}}
		for i := 0; i < b.N; i++ {
			if _, err := engine.Run(ctx, turn, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("outpost-held-lease", func(b *testing.B) {
		l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: wd})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close(ctx)
		o := &engine.RunOptions{Lease: l, Store: conversation.NewFS(b.TempDir()), Environ: []string{}}
		for i := 0; i < b.N; i++ {
			if _, err := engine.Run(ctx, turn, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := rawRun(b)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil || len(out) == 0 {
				b.Fatalf("docker run: %v %q", err, out)
			}
		}
	})
}
