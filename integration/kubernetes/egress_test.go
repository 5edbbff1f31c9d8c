package kubernetes

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestTunnelEgressGateway runs the suite's tunnel tests on pods opened
// with EgressGateway (their NetworkPolicy in place), with the rights of
// the shipped minimal Role only.
func TestTunnelEgressGateway(t *testing.T) {
	c := kubetest.Parallel(t)
	sandboxtest.RunTunnelTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			return c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox })
		},
		Options: func(t *testing.T) driver.Options {
			return driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway}
		},
	})
}

// TestNetworkPolicy: a lease opened with EgressGateway has a
// NetworkPolicy that selects its pod and denies all its ingress and
// egress while it lives, and none once it is released; an open lease has
// none. (The test cluster's bridge plugin does not enforce NetworkPolicy:
// the policy's presence is what is checked here; the tunnel is the way
// out either way.)
func TestNetworkPolicy(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox })
	if !p.Capabilities().Egress {
		t.Error("Capabilities.Egress is false")
	}
	policies := c.Admin.NetworkingV1().NetworkPolicies(c.Namespace)

	open, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	if _, err := policies.Get(t.Context(), open.ID(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an open lease's NetworkPolicy: %v, want none", err)
	}

	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	np, err := policies.Get(t.Context(), l.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the lease's NetworkPolicy: %v", err)
	}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kubernetes.LabelLease: l.ID()}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
	if diff := cmp.Diff(want, np.Spec); diff != "" {
		t.Errorf("NetworkPolicy spec (-want +got):\n%s", diff)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].Kind != "Lease" {
		t.Errorf("owner references %+v, want the provider's owner Lease", np.OwnerReferences)
	}
	pod := c.Pods(t, kubernetes.LabelLease+"="+l.ID())
	if len(pod) != 1 {
		t.Fatalf("%d pods of the lease", len(pod))
	}
	if pod[0].Labels[kubernetes.LabelLease] != l.ID() {
		t.Errorf("the policy does not select the pod: labels %v", pod[0].Labels)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Get(t.Context(), l.ID(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the NetworkPolicy after release: %v, want it gone", err)
	}
}
