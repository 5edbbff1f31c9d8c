package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestConformance runs the provider conformance suite on the busybox
// image (the suite's programs are shell scripts), with the rights of the
// shipped minimal Role only. It is the package's one test that runs alone
// (before the others start): the suite sets a host variable (t.Setenv).
func TestConformance(t *testing.T) {
	c := kubetest.Require(t)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			return c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox })
		},
	})
}

type turns struct {
	t       *testing.T
	store   conversation.Store
	workdir string
	mu      sync.Mutex
	events  []harness.Event
}

func (f *turns) run(ctx context.Context, p driver.Provider, l *sandbox.Lease, turn engine.Turn, mod ...func(*engine.RunOptions)) (*engine.Result, error) {
	f.mu.Lock()
	f.events = nil
	f.mu.Unlock()
	if turn.Agent.Harness == nil {
		turn.Agent = harness.Agent{Kind: "cli", Harness: echo.Harness()}
	}
	if turn.Workdir == "" {
		turn.Workdir = f.workdir
	}
	o := &engine.RunOptions{Provider: p, Lease: l, Store: f.store, Environ: []string{"PATH=" + os.Getenv("PATH")}, Grace: 500 * time.Millisecond,
		OnEvent: func(ev harness.Event) {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
		}}
	for _, m := range mod {
		m(o)
	}
	return engine.Run(ctx, turn, o)
}

func (f *turns) ok(p driver.Provider, turn engine.Turn) *engine.Result {
	f.t.Helper()
	res, err := f.run(context.Background(), p, nil, turn)
	if err != nil {
		f.t.Fatalf("%q on %s: %v", turn.Prompt, p.Name(), err)
	}
	return res
}

func wantTurn(t *testing.T, res *engine.Result, n int) {
	t.Helper()
	if want := fmt.Sprintf("(turn %d)", n); !strings.Contains(res.Text, want) {
		t.Errorf("final text %q lacks %q", res.Text, want)
	}
}

// TestEchoTurns: echo turns in pods (each in a fresh pod), resumed and
// forked; the workspace comes back; the lease's pod is deleted.
func TestEchoTurns(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t)
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	res := f.ok(p, engine.Turn{Prompt: "hello"})
	wantTurn(t, res, 1)
	if res.Sandbox != "kubernetes" || res.Conversation == "" || !res.Usage.Complete {
		t.Errorf("result %+v", res)
	}
	res2 := f.ok(p, engine.Turn{Prompt: "again", Resume: res.Conversation})
	wantTurn(t, res2, 2)
	if res2.Conversation != res.Conversation {
		t.Errorf("resume changed the conversation: %s", res2.Conversation)
	}
	fork := f.ok(p, engine.Turn{Prompt: "forked", Fork: res.Conversation})
	wantTurn(t, fork, 3)
	if fork.Parent != res.Conversation || fork.Session == res2.Session {
		t.Errorf("fork %+v", fork)
	}
	wantTurn(t, f.ok(p, engine.Turn{Prompt: "fork again", Resume: fork.Conversation}), 4)
	if pods := c.Pods(t, kubernetes.LabelRole+"=sandbox"); len(livePods(pods)) != 0 {
		t.Errorf("pods left after the turns: %v", livePods(pods))
	}
}

// TestWorkspaceRoundTrip: the caller's directory is copied in, the
// sandbox's changes come back, .outpost/ stays on the host.
func TestWorkspaceRoundTrip(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox })
	dir := t.TempDir()
	write(t, dir, "keep.txt", "host\n")
	write(t, dir, "sub/edit.txt", "before\n")
	write(t, dir, ".outpost/.env", "SECRET=1\n")
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "cat keep.txt; test -e .outpost && echo LEAKED; echo after > sub/edit.txt; echo new > new.txt"}, Env: map[string]string{"PATH": "/bin"}}, 1<<20)
	if err != nil || !res.Status.Success() {
		t.Fatalf("exec: %v %+v %s", err, res.Status, res.Stderr)
	}
	if got := string(res.Stdout); got != "host\n" {
		t.Errorf("the sandbox saw %q", got)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, want := range map[string]string{"keep.txt": "host\n", "sub/edit.txt": "after\n", "new.txt": "new\n", ".outpost/.env": "SECRET=1\n"} {
		if got := read(t, dir, name); got != want {
			t.Errorf("%s on the host: %q, want %q", name, got, want)
		}
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func livePods(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestDockerToKubernetes: a conversation started on docker resumes on
// kubernetes, and back.
func TestDockerToKubernetes(t *testing.T) {
	c := kubetest.Parallel(t)
	dockertest.Require(t)
	d, err := docker.New(&docker.Options{Binary: c.Binary})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	k := c.Provider(t)
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	c1 := f.ok(d, engine.Turn{Prompt: "born in docker"})
	wantTurn(t, c1, 1)
	r := f.ok(k, engine.Turn{Prompt: "in a pod", Resume: c1.Conversation})
	wantTurn(t, r, 2)
	r = f.ok(d, engine.Turn{Prompt: "back in docker", Resume: c1.Conversation})
	wantTurn(t, r, 3)
	fork := f.ok(k, engine.Turn{Prompt: "forked in a pod", Fork: c1.Conversation})
	wantTurn(t, fork, 4)
	m, err := f.store.Meta(t.Context(), c1.Conversation)
	if err != nil || m.Turns != 3 || m.Sandbox != "docker" {
		t.Errorf("meta %+v, %v", m, err)
	}
}

// TestPodDeletedMidTurn: deleting the pod during a turn fails the turn
// with code sandbox and details.vanished, naming the pod.
func TestPodDeletedMidTurn(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t)
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: f.workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	var once sync.Once
	_, err = f.run(t.Context(), nil, l, engine.Turn{Prompt: "#slow=100000"}, func(o *engine.RunOptions) {
		inner := o.OnEvent
		o.OnEvent = func(ev harness.Event) {
			inner(ev)
			if ev.Type == harness.EventMessage && ev.Delta {
				once.Do(func() {
					if err := c.Admin.CoreV1().Pods(c.Namespace).Delete(context.Background(), l.ID(), metav1.DeleteOptions{}); err != nil {
						t.Errorf("deleting the pod: %v", err)
					}
				})
			}
		}
	})
	if outpost.CodeOf(err) != outpost.Sandbox {
		t.Fatalf("code %q, want sandbox (%v)", outpost.CodeOf(err), err)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Details["vanished"] != true {
		t.Errorf("details lack vanished: %v", err)
	}
	if !errors.Is(err, driver.ErrVanished) || !strings.Contains(err.Error(), l.ID()) {
		t.Errorf("the error does not say which pod vanished and why: %v", err)
	}
}

// TestImageMissing: a pod whose image does not exist fails the lease with
// a sandbox error naming the cause, without waiting out the start bound.
func TestImageMissing(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = "outpost/does-not-exist:1"; o.StartTimeout = 2 * time.Minute })
	_, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if outpost.CodeOf(err) != outpost.Sandbox || !errors.Is(err, kubernetes.ErrStart) {
		t.Fatalf("err %v, want code sandbox wrapping ErrStart", err)
	}
	if !strings.Contains(err.Error(), "ErrImageNeverPull") || !strings.Contains(err.Error(), "outpost/does-not-exist:1") {
		t.Errorf("the error does not name the cause: %v", err)
	}
	if strings.Contains(err.Error(), "not running after") {
		t.Errorf("the start waited out its bound instead of failing on the cause: %v", err)
	}
	waitNoPods(t, c, kubernetes.LabelRole+"=sandbox")
}

// TestUnschedulable: a pod no node can take waits out the provider's
// start bound, then fails with code sandbox naming the scheduler's reason,
// and is deleted.
func TestUnschedulable(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, func(o *kubernetes.Options) {
		o.NodeSelector = map[string]string{"outpost-test/no-such-node": "1"}
		o.StartTimeout = 3 * time.Second
	})
	_, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if outpost.CodeOf(err) != outpost.Sandbox || !errors.Is(err, kubernetes.ErrStart) {
		t.Fatalf("err %v, want code sandbox wrapping ErrStart", err)
	}
	if !strings.Contains(err.Error(), "Unschedulable") {
		t.Errorf("the error does not name the scheduler's reason: %v", err)
	}
	waitNoPods(t, c, kubernetes.LabelRole+"=sandbox")
}

// waitNoPods waits (bounded by the test's deadline) until no pod matches.
func waitNoPods(t *testing.T, c *kubetest.Cluster, selector string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		l, err := c.Admin.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatalf("pods matching %s still there: %v", selector, err)
		}
		if len(l.Items) == 0 {
			return
		}
		w, err := c.Admin.CoreV1().Pods(c.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: l.ResourceVersion})
		if err != nil {
			t.Fatalf("pods matching %s still there: %v", selector, err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				break
			}
		}
		w.Stop()
	}
}

// TestConfigurationErrors: a bad kubeconfig, and a namespace the user has
// no rights in, are configuration errors of sandbox.Open.
func TestConfigurationErrors(t *testing.T) {
	c := kubetest.Parallel(t)
	garbage := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(garbage, []byte("{this is not: a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		settings map[string]string
		is       error
		says     string
	}{
		{"missing-kubeconfig", map[string]string{"kubeconfig": "/nonexistent/kubeconfig"}, kubernetes.ErrConfig, "/nonexistent/kubeconfig"},
		{"garbage-kubeconfig", map[string]string{"kubeconfig": garbage}, kubernetes.ErrConfig, garbage},
		{"unknown-context", map[string]string{"kubeconfig": c.Kubeconfig, "context": "nope"}, kubernetes.ErrConfig, "nope"},
		{"forbidden-namespace", map[string]string{"kubeconfig": c.Kubeconfig, "namespace": "default"}, kubernetes.ErrForbidden, "rbac.yaml"},
		{"bad-setting", map[string]string{"cpu": "lots"}, outpost.ErrConfiguration, "cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sandbox.Open("kubernetes", tc.settings)
			if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err %v (code %q), want configuration wrapping %v and saying %q", err, outpost.CodeOf(err), tc.is, tc.says)
			}
		})
	}
	// The namespace the Role is bound in passes the same check.
	if _, err := sandbox.Open("kubernetes", map[string]string{"kubeconfig": c.Kubeconfig, "namespace": c.Namespace}); err != nil {
		t.Errorf("the test namespace: %v", err)
	}
}

// TestKilledOutpostLeavesNoPod kills `outpost run` with SIGKILL mid-turn:
// its owner Lease stops being renewed; once past its renew deadline
// (lease_duration, 6 s here) any outpost deletes it (here `outpost gc
// --sandbox kubernetes`), and the cluster's garbage collector deletes the
// pod. The bound: the lease duration, then the GC's reaction (seconds).
func TestKilledOutpostLeavesNoPod(t *testing.T) {
	c := kubetest.Parallel(t)
	home := t.TempDir()
	set := []string{"--set", "kubeconfig=" + c.Kubeconfig, "--set", "namespace=" + c.Namespace, "--set", "pull=never",
		"--set", "binary=" + c.Binary, "--set", "cpu_request=10m", "--set", "memory_request=16Mi"}
	args := append([]string{"run", "--sandbox", "kubernetes", "--set", "lease_duration=6s"}, set...)
	cli := testenv.OutpostBinary(t) // the CLI; c.Binary is the in-sandbox binary
	cmd := exec.Command(cli, append(args, "--json", "#slow=100000")...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	delta := false
	for !delta && sc.Scan() {
		var ev struct {
			Type  string `json:"type"`
			Delta bool   `json:"delta"`
		}
		delta = json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == "message" && ev.Delta
	}
	if !delta {
		cmd.Wait()
		t.Fatalf("outpost ended before the agent printed anything: %s", stderr.String())
	}
	pods := livePods(c.Pods(t, kubernetes.LabelRole+"=sandbox"))
	if len(pods) != 1 {
		t.Fatalf("pods mid-turn: %v, want one", pods)
	}
	pod := pods[0]
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The pod outlives its outpost until the Lease expires.
	if _, err := c.Admin.CoreV1().Pods(c.Namespace).Get(t.Context(), pod, metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod went with its outpost before its Lease expired: %v", err)
	}
	// Another outpost sweeps: gc until it deletes the expired Lease.
	start := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.Command(cli, append([]string{"gc", "--sandbox", "kubernetes", "--json"}, set...)...).Output()
		if err != nil {
			t.Fatalf("outpost gc: %v\n%s", err, out)
		}
		var rep kubernetes.GCReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("gc --json: %v\n%s", err, out)
		}
		if len(rep.Leases) > 0 {
			if len(rep.Leases[0].Pods) != 1 || rep.Leases[0].Pods[0] != pod || !rep.Leases[0].Deleted {
				t.Errorf("gc report %+v, want the Lease of pod %s deleted", rep, pod)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lease expired within 2 minutes")
		}
		// Wait for the renew deadline without a sleep: watch the Lease
		// object's renewals stop (none come: it is dead), bounded.
		wctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		w, err := c.Admin.CoordinationV1().Leases(c.Namespace).Watch(wctx, metav1.ListOptions{FieldSelector: fields.Everything().String()})
		if err == nil {
			for range w.ResultChan() {
			}
			w.Stop()
		}
		cancel()
	}
	waitNoPods(t, c, kubernetes.LabelLease+"="+pod)
	t.Logf("pod %s deleted %v after its outpost was killed (lease duration 6s)", pod, time.Since(start).Round(100*time.Millisecond))
}

var _ = io.Discard
