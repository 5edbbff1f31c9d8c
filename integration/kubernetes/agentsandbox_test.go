package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

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

// TestAgentSandboxEscape runs the escape suite on claimed pods (the
// conformance test's template and pool): every row the provider claims
// is blocked. The test cluster's bridge CNI does not enforce
// NetworkPolicy, so the rows that reach the host's address directly are
// not claimed here (TestNetworkPolicy checks the lease's policy; a
// cluster whose CNI enforces it, as Calico's or Cilium's does, blocks
// them). Not parallel: the suite sets HOME.
func TestAgentSandboxEscape(t *testing.T) {
	c := kubetest.Require(t)
	claim := c.AgentSandbox(t, "outpost-conformance", 1)
	cni := "the test cluster's bridge CNI does not enforce NetworkPolicy (TestNetworkPolicy checks the lease's)"
	rep := sandboxtest.RunEscapeTests(t, sandboxtest.EscapeHarness{
		NewProvider: func(t *testing.T) driver.Provider { return c.Provider(t, claim) },
		HostIP:      c.Gateway,
		Unclaimed:   map[string]string{"direct-address": cni, "curl-noproxy": cni, "node-fetch": cni},
	})
	if rep.Unenforced {
		t.Error("claimed leases reported unenforced")
	}
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
	ds, err := p.Open(t.Context(), driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		t.Fatal(err)
	}
	pod := ds.(*kubernetes.Sandbox).Pod()
	if !slices.Contains(warm, pod) {
		t.Errorf("the claim got pod %s, not the warm pool's %v", pod, warm)
	}
	// Its NetworkPolicy selects the claimed pod (by the claim's UID).
	np, err := c.Admin.NetworkingV1().NetworkPolicies(c.Namespace).Get(t.Context(), ds.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's NetworkPolicy: %v", err)
	}
	claimed, err := c.Admin.CoreV1().Pods(c.Namespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || sel.Empty() || !sel.Matches(labels.Set(claimed.Labels)) {
		t.Errorf("the NetworkPolicy's selector %v does not select pod %s, labels %v (%v)", np.Spec.PodSelector, pod, claimed.Labels, err)
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
