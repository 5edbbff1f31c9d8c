package kubernetes

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Figures from these benchmarks are in docs/benchmarks.md ("Kubernetes"):
//
//	go test ./integration/kubernetes -run '^$' -bench . -benchtime 5x

// kubectlRun is `kubectl run --rm -i` of the echo agent in the outpost
// image (what a user would type), with the cluster admin's kubeconfig in
// the test namespace.
func kubectlRun(b *testing.B, c *kubetest.Cluster, name string) *exec.Cmd {
	return exec.Command(c.Env["KUBECTL"], "--kubeconfig", c.Env["KUBECONFIG"], "-n", c.Namespace, "run", name, "--rm", "-i", "--quiet",
		"--restart=Never", "--image="+c.Image, "--image-pull-policy=Never", "--command", "--", kubernetes.ImageBinary, echo.Subcommand, "--", "hello")
}

// BenchmarkKubernetesFirstByte measures a new lease (owner Lease reused,
// pod made and started, workspace copied in) until the first byte the
// echo agent prints in it, against `kubectl run --rm -i` of the same
// agent until its first byte. Releases are not counted.
func BenchmarkKubernetesFirstByte(b *testing.B) {
	c := kubetest.Require(b)
	wd := b.TempDir()
	ctx := context.Background()
	buf := make([]byte, 1)
	b.Run("kubectl-run", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			cmd := kubectlRun(b, c, "bench-fb-"+itoa(i)+"-"+itoa(int(time.Now().UnixNano()%1e9)))
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
	// Each outpost case twice: its processes as streams of the lease's
	// serving exec (the default), and each an exec of its own
	// (exec_each, as before the serving exec).
	for _, pc := range []struct {
		suffix   string
		execEach bool
	}{{"", false}, {"-exec-each", true}} {
		mode := func(o *kubernetes.Options) { o.ExecEach = pc.execEach }
		p := c.Provider(b, mode)
		b.Run("outpost"+pc.suffix, func(b *testing.B) {
			for b.Loop() {
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
		// pool: a pod taken from a warm sandbox.Pool (as `outpost serve`
		// keeps them), so the pod's start is paid ahead of the turn; the
		// pool refills between iterations, not counted.
		b.Run("pool"+pc.suffix, func(b *testing.B) {
			// A provider of its own: the pool's Close closes it (-count).
			p := c.Provider(b, mode)
			ready := make(chan sandbox.PoolStats, 1024)
			pool := sandbox.NewPool(&sandbox.PoolOptions{
				Size:     1,
				Open:     func(string, map[string]string) (driver.Provider, error) { return p, nil },
				OnChange: func(s sandbox.PoolStats) { ready <- s },
			})
			defer pool.Close(ctx)
			key := sandbox.PoolKey{Provider: "kubernetes", Workdir: wd}
			if err := pool.Warm(key); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				for s := range ready {
					if s.Ready == 1 && s.Leased == 0 {
						break
					}
				}
				b.StartTimer()
				l, err := pool.Get(ctx, key)
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
				pr.Wait()
				pr.Close()
				pool.Release(key, l)
				b.StartTimer()
			}
		})
	}
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// BenchmarkKubernetesTurn compares a whole echo turn through outpost on
// kubernetes (pod leased, agent run and decoded, conversation captured,
// workspace copied back, pod deleted), and a turn on a held lease, with
// `kubectl run --rm -i` of the same agent to its end.
func BenchmarkKubernetesTurn(b *testing.B) {
	c := kubetest.Require(b)
	wd := b.TempDir()
	ctx := context.Background()
	turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}
	b.Run("kubectl-run", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if out, err := kubectlRun(b, c, "bench-turn-"+itoa(i)+"-"+itoa(int(time.Now().UnixNano()%1e9))).CombinedOutput(); err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
		}
	})
	for _, pc := range []struct {
		suffix   string
		execEach bool
	}{{"", false}, {"-exec-each", true}} {
		p := c.Provider(b, func(o *kubernetes.Options) { o.ExecEach = pc.execEach })
		b.Run("outpost"+pc.suffix, func(b *testing.B) {
			o := &engine.RunOptions{Provider: p, Store: conversation.NewFS(b.TempDir()), Environ: []string{}}
			for b.Loop() {
				if _, err := engine.Run(ctx, turn, o); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("outpost-held-lease"+pc.suffix, func(b *testing.B) {
			l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: wd})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close(ctx)
			o := &engine.RunOptions{Lease: l, Store: conversation.NewFS(b.TempDir()), Environ: []string{}}
			for b.Loop() {
				if _, err := engine.Run(ctx, turn, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKubernetesBootstrap measures a second bootstrap of the pinned
// Claude Code into a pod of the Debian image (bootstrap.Installer.Ensure,
// as a turn's step 5 runs it), the host cache warm and mounted read-only
// through a hostPath volume (node_cache). Compare with npm-install of
// BenchmarkBootstrap (integration).
func BenchmarkKubernetesBootstrap(b *testing.B) {
	c := kubetest.Require(b)
	inst := &bootstrap.Installer{}
	ctx := context.Background()
	if _, err := inst.Prefetch(ctx, "claude", bootstrap.HostPlatform(), nil); err != nil {
		b.Fatal(err)
	}
	host, target, err := inst.SharedCache()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cache bool
	}{{"node-cache", true}, {"copy", false}} {
		b.Run(tc.name, func(b *testing.B) {
			p := c.Provider(b, func(o *kubernetes.Options) { o.Image = kubetest.Debian; o.NodeCache = tc.cache })
			for b.Loop() {
				b.StopTimer()
				l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: b.TempDir(), Mounts: []driver.Mount{{Source: host, Target: target}}})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := inst.Ensure(ctx, l, "claude", "claude", nil)
				b.StopTimer()
				if err != nil || !strings.HasSuffix(res, "/bin/claude") {
					b.Fatal(res, err)
				}
				l.Close(ctx)
				b.StartTimer()
			}
		})
	}
}
