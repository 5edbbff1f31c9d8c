package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// The via=agent-sandbox mode: leases are SandboxClaims served by the
// agent-sandbox controller the test cluster runs (scripts/kube-up.sh).

// TestAgentSandboxConformance runs the provider conformance suite with
// every lease a claim against a template of the busybox image (its pool
// keeps one pod warm). Not parallel: the suite sets a host variable.
func TestAgentSandboxConformance(t *testing.T) {
	c := kubetest.Require(t)
	claim := c.AgentSandbox(t, "outpost-conformance", 1)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider { return c.Provider(t, claim) },
	})
}

// TestAgentSandboxTurns: a lease is served from the warm pool (its pod
// is the pool's ready one), echo turns resume and fork on claimed pods,
// every claim is deleted on release; a missing template is a
// configuration error naming it.
func TestAgentSandboxTurns(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, c.AgentSandbox(t, "outpost-echo", 1))
	warm := livePods(c.Pods(t, kubernetes.LabelManaged+"="+"outpost"))
	if len(warm) != 1 {
		t.Fatalf("warm pods %v, want 1", warm)
	}
	ds, err := p.Open(t.Context(), driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if pod := ds.(*kubernetes.Sandbox).Pod(); !slices.Contains(warm, pod) {
		t.Errorf("the claim got pod %s, not the warm pool's %v", pod, warm)
	}
	if err := ds.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	res := f.ok(p, engine.Turn{Prompt: "hello"})
	wantTurn(t, res, 1)
	wantTurn(t, f.ok(p, engine.Turn{Prompt: "again", Resume: res.Conversation}), 2)
	fork := f.ok(p, engine.Turn{Prompt: "forked", Fork: res.Conversation})
	wantTurn(t, fork, 3)
	if fork.Parent != res.Conversation {
		t.Errorf("fork %+v", fork)
	}
	if left := strings.TrimSpace(c.Kubectl(t, nil, "get", "sandboxclaims", "-l", kubernetes.LabelRole+"=claim", "-o", "name")); left != "" {
		t.Errorf("claims left after the turns: %s", left)
	}

	missing, err := kubernetes.New(&kubernetes.Options{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace, Binary: c.Binary, Via: kubernetes.ViaAgentSandbox, Template: "no-such-template"})
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	if _, err := sandbox.Acquire(t.Context(), missing, driver.Options{Workdir: t.TempDir()}); !errors.Is(err, kubernetes.ErrConfig) || !strings.Contains(err.Error(), "no-such-template") {
		t.Errorf("a missing template: %v, want ErrConfig naming it", err)
	}
}
