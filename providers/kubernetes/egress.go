package kubernetes

import (
	"context"
	"net"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/providers/tunnel"
)

// Tunnel carries connections made to a loopback address of the pod to
// the host over an exec of outpost's binary (providers/tunnel): no
// Service, no node port, nothing another pod can reach, and it works
// wherever exec works, a NetworkPolicy denying everything or not. It
// implements driver.Tunneler.
func (s *Sandbox) Tunnel(ctx context.Context) (string, net.Listener, error) {
	return tunnel.Open(ctx, s, layout.BinaryPath, s.closing.Load)
}

// networkPolicy denies all ingress and egress of the lease's pod (it
// selects the pod by its lease label): the pod of a lease opened with
// driver.EgressGateway, where the cluster's network plugin enforces
// NetworkPolicy. It is made before the pod, so the pod never runs
// unrestricted, and owned by the provider's owner Lease, as the pod is:
// a process that dies leaves nothing the garbage collector keeps.
func networkPolicy(s *Sandbox, o *owner, selector map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.id,
			Labels:          map[string]string{LabelManaged: managedBy, LabelLease: s.id, LabelOwner: o.name},
			OwnerReferences: []metav1.OwnerReference{o.ref()},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			// No rules: nothing in, nothing out.
		},
	}
}

// createPolicy makes the lease's NetworkPolicy (networkPolicy) on the
// pods selector selects (the lease label; a claim's UID with via=agent-sandbox).
func (s *Sandbox) createPolicy(ctx context.Context, o *owner, selector map[string]string) error {
	if _, err := s.p.api.policies.create(ctx, networkPolicy(s, o, selector)); err != nil {
		return s.p.apiErr(ctx, "creating the pod's NetworkPolicy", err)
	}
	s.policy = true
	return nil
}

// deletePolicy deletes the lease's NetworkPolicy, if it made one. One
// already gone is not an error.
func (s *Sandbox) deletePolicy(ctx context.Context) error {
	if !s.policy {
		return nil
	}
	err := s.p.api.policies.delete(ctx, s.id, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return s.p.apiErr(ctx, "deleting NetworkPolicy "+s.id, err)
	}
	return nil
}
