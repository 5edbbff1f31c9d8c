package kubernetes

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
				firstByte(b, l)
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
			benchPool(b, c.Provider(b, mode), wd)
		})
	}
	// via=agent-sandbox: a claim served from the template's warm pool,
	// and one with no pod warm (benchClaims).
	b.Run("agent-sandbox-warm", func(b *testing.B) { benchClaims(b, c, "bench-warm", 1) })
	b.Run("agent-sandbox-cold", func(b *testing.B) { benchClaims(b, c, "bench-cold", 0) })
	// and claims made ahead by a sandbox.Pool, as the pool case's pods
	b.Run("agent-sandbox-pool", func(b *testing.B) {
		benchPool(b, c.Provider(b, c.AgentSandbox(b, "bench-pool", 1, func(o *kubernetes.Options) { o.Image = "" })), wd)
	})
}

// benchPool is BenchmarkKubernetesFirstByte's pool case: a lease of p
// taken from a warm sandbox.Pool of one (as `outpost serve` keeps them),
// so its start is paid ahead of the turn; the pool refills between
// iterations, not counted. The pool's Close closes p.
func benchPool(b *testing.B, p driver.Provider, wd string) {
	ctx := context.Background()
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
		firstByte(b, l)
		pool.Release(key, l)
		b.StartTimer()
	}
}

// benchClaims is BenchmarkKubernetesFirstByte's via=agent-sandbox case:
// a lease is a SandboxClaim against a template of the outpost image (as
// the other cases' pods), until the echo agent's first byte. replicas 1:
// its pod is the SandboxWarmPool's (the refill between iterations not
// counted; cold/op counts the claims that got a pod made after them);
// replicas 0: the controller makes the Sandbox and its pod from the
// template. Releases (the claim deleted) are not counted.
func benchClaims(b *testing.B, c *kubetest.Cluster, name string, replicas int32) {
	ctx := context.Background()
	p := c.Provider(b, c.AgentSandbox(b, name, replicas, func(o *kubernetes.Options) { o.Image = "" }))
	wd := b.TempDir()
	cold := 0
	for b.Loop() {
		b.StopTimer()
		if replicas > 0 {
			waitWarm(b, c, name)
		}
		start := time.Now()
		b.StartTimer()
		l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: wd})
		if err != nil {
			b.Fatal(err)
		}
		firstByte(b, l)
		pod, err := c.Admin.CoreV1().Pods(c.Namespace).Get(ctx, l.Sandbox().(*kubernetes.Sandbox).Pod(), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if pod.CreationTimestamp.After(start.Add(-time.Second)) { // its resolution: seconds
			cold++
		}
		if err := l.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cold)/float64(b.N), "cold/op")
}

// waitWarm waits until template has a ready warm pod no claim owns.
func waitWarm(b *testing.B, c *kubetest.Cluster, template string) {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, pod := range c.Pods(b, kubetest.LabelTemplate+"="+template+",!"+kubernetes.LabelClaimUID) {
			if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && podReady(&pod) {
				return
			}
		}
	}
	b.Fatal("no warm pod within 2 minutes")
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// firstByte starts the echo agent in l and reads its first byte; the
// timer is stopped after it, and the agent's end waited for.
func firstByte(b *testing.B, l *sandbox.Lease) {
	ctx := context.Background()
	env := l.Environment()
	pr, err := l.Start(ctx, driver.ExecRequest{Path: layout.BinaryPath, Args: []string{echo.Subcommand, "--", "hello"}, Env: map[string]string{"HOME": env.Fixed["HOME"], "PATH": env.Defaults["PATH"]}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(pr.Stdout(), make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	go io.Copy(io.Discard, pr.Stderr())
	io.Copy(io.Discard, pr.Stdout())
	if st, err := pr.Wait(); err != nil || !st.Success() {
		b.Fatalf("agent: %+v %v", st, err)
	}
	pr.Close()
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
