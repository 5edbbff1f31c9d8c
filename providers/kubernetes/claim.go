package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	sandboxv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// The via=agent-sandbox mode: a lease is a SandboxClaim (agent-sandbox's
// extensions group) naming a SandboxWarmPool of the SandboxTemplate
// Options.Template; agent-sandbox's controller binds it to a Sandbox (one
// of the pool's, or a new one from the template) whose pod then runs
// outpost's shim as the provider's own pods do. Release deletes the claim
// (the controller's garbage deletes its Sandbox and pod). The claim is
// owned by the provider's owner Lease, as pods are, so GC and the
// cluster's garbage collector find the claims of a dead outpost.

// checkVia validates Options.Via and its settings.
func checkVia(o *Options) error {
	switch o.Via {
	case "":
		o.Via = ViaPod
	case ViaPod, ViaAgentSandbox:
	default:
		return fmt.Errorf("%w: unknown via %q (pod, agent-sandbox)", ErrConfig, o.Via)
	}
	if o.Via == ViaAgentSandbox && o.Template == "" {
		return fmt.Errorf("%w: via=agent-sandbox needs a template (--set template=NAME: a SandboxTemplate of the namespace)", ErrConfig)
	}
	if o.Via == ViaPod && (o.Template != "" || o.WarmPool != "") {
		return fmt.Errorf("%w: template and warm_pool are settings of via=agent-sandbox", ErrConfig)
	}
	return nil
}

// claimed reports whether leases are SandboxClaims.
func (p *Provider) claimed() bool { return p.opts.Via == ViaAgentSandbox }

// neededClaims are the further rights of via=agent-sandbox (the Role of
// rbac.yaml grants them too).
var neededClaims = []authv1.ResourceAttributes{
	{Verb: "create", Group: extv1.GroupVersion.Group, Resource: "sandboxclaims"},
	{Verb: "delete", Group: extv1.GroupVersion.Group, Resource: "sandboxclaims"},
	{Verb: "get", Group: extv1.GroupVersion.Group, Resource: "sandboxtemplates"},
}

// needed are the rights Preflight checks.
func (p *Provider) needed() []authv1.ResourceAttributes {
	if !p.claimed() {
		return needed
	}
	return append(append([]authv1.ResourceAttributes{}, needed...), neededClaims...)
}

// LabelClaimUID is the label agent-sandbox's controller puts on a claimed
// pod: its claim's UID (the lease's NetworkPolicy selects it).
const LabelClaimUID = extv1.SandboxIDLabel

// SandboxTemplate returns a SandboxTemplate named name whose pods are the
// provider's own (the hardened pod of pod.go: outpost's binary copied in
// by an init container, the shim's init, the provider's image, user and
// resources), without a lease's identity, lifetime or node cache. A
// cluster admin applies it (with a SandboxWarmPool naming it) for
// via=agent-sandbox; its network policy is left to the provider
// (Unmanaged: egress as with the provider's own pods).
func (p *Provider) SandboxTemplate(ctx context.Context, name string) (*extv1.SandboxTemplate, error) {
	img, err := p.resolveImage(ctx)
	if err != nil {
		return nil, err
	}
	pod := p.podSpec(&Sandbox{}, img, &owner{}, nil)
	pod.Spec.ActiveDeadlineSeconds = nil // a warm pod waits; the claim's lifecycle bounds a lease
	return &extv1.SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: extv1.SandboxTemplateKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManaged: managedBy}},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint: sandboxv1.SandboxBlueprint{PodTemplate: sandboxv1.PodTemplate{
				Spec:       pod.Spec,
				ObjectMeta: sandboxv1.PodMetadata{Labels: map[string]string{LabelManaged: managedBy}},
			}},
			NetworkPolicyManagement: extv1.NetworkPolicyManagementUnmanaged,
		},
	}, nil
}

// warmPool is the pool the claims name: Options.WarmPool, else the
// namespace's pool of Options.Template (found once). The template must
// exist. Errors wrap ErrConfig naming what is missing.
func (p *Provider) warmPool(ctx context.Context) (string, error) {
	p.mu.Lock()
	pool := p.pool
	p.mu.Unlock()
	if pool != "" {
		return pool, nil
	}
	if _, err := p.api.templates.get(ctx, p.opts.Template); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: no SandboxTemplate %q in namespace %s (is agent-sandbox installed? docs/sandboxes/kubernetes.md)", ErrConfig, p.opts.Template, p.ns)
		}
		return "", p.apiErr(ctx, "reading SandboxTemplate "+p.opts.Template, err)
	}
	pool = p.opts.WarmPool
	if pool == "" {
		var pools extv1.SandboxWarmPoolList
		if err := p.api.pools.list(ctx, metav1.ListOptions{}, &pools); err != nil {
			return "", p.apiErr(ctx, "listing SandboxWarmPools", err)
		}
		for _, wp := range pools.Items {
			if wp.Spec.TemplateRef.Name == p.opts.Template && (pool == "" || wp.Name < pool) {
				pool = wp.Name
			}
		}
		if pool == "" {
			return "", fmt.Errorf("%w: SandboxTemplate %q has no SandboxWarmPool in namespace %s: a claim names a pool (replicas 0 for none warm; docs/sandboxes/kubernetes.md)", ErrConfig, p.opts.Template, p.ns)
		}
	}
	p.mu.Lock()
	p.pool = pool
	p.mu.Unlock()
	return pool, nil
}

// claimSpec is the lease's SandboxClaim: named as the lease, owned by the
// owner Lease, bounded by MaxLifetime.
func (p *Provider) claimSpec(s *Sandbox, pool string, o *owner, labels map[string]string) *extv1.SandboxClaim {
	l := podLabels(s, o, labels)
	l[LabelRole] = "claim"
	end := metav1.NewTime(time.Now().Add(p.opts.MaxLifetime))
	return &extv1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.id,
			Labels:          l,
			Annotations:     map[string]string{AnnotationHost: s.host, AnnotationVersion: version()},
			OwnerReferences: []metav1.OwnerReference{o.ref()},
		},
		Spec: extv1.SandboxClaimSpec{
			WarmPoolRef: extv1.SandboxWarmPoolRef{Name: pool},
			Lifecycle:   &extv1.Lifecycle{ShutdownTime: &end, ShutdownPolicy: extv1.ShutdownPolicyDelete},
		},
	}
}

// startClaim makes the lease's claim (and, for egress gateway, its
// NetworkPolicy on the claim's UID), waits until it is bound to a ready
// Sandbox and its pod runs (at most StartTimeout in all) and sets s.pod,
// s.uid and s.gid from that pod.
func (p *Provider) startClaim(ctx context.Context, s *Sandbox, o *owner, egress bool, labels map[string]string) error {
	pool, err := p.warmPool(ctx)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(p.opts.StartTimeout)
	c, err := p.api.claims.create(ctx, p.claimSpec(s, pool, o, labels))
	if err != nil {
		if ctx.Err() != nil {
			s.claim = true // it may have been made before the request was dropped
			return ctx.Err()
		}
		return p.apiErr(ctx, "creating the SandboxClaim", err)
	}
	s.claim = true
	var match func(*corev1.Pod) bool
	if egress {
		sel := map[string]string{LabelClaimUID: string(c.UID)}
		if err := s.createPolicy(ctx, o, sel); err != nil {
			return err
		}
		// Nothing runs before the policy selects the pod.
		match = func(pod *corev1.Pod) bool { return pod.Labels[LabelClaimUID] == string(c.UID) }
	}
	if s.pod, err = p.waitClaim(ctx, c, deadline); err != nil {
		return err
	}
	pod, err := p.waitRunning(ctx, s.pod, deadline, match)
	if err != nil {
		return err
	}
	return s.claimedPod(pod)
}

// claimedPod checks that a claimed pod can serve a lease and takes its
// user.
func (s *Sandbox) claimedPod(pod *corev1.Pod) error {
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		uid, gid := s.p.opts.UID, s.p.opts.GID
		if ps := pod.Spec.SecurityContext; ps != nil {
			uid, gid = deref(ps.RunAsUser, uid), deref(ps.RunAsGroup, gid)
		}
		if cs := c.SecurityContext; cs != nil {
			uid, gid = deref(cs.RunAsUser, uid), deref(cs.RunAsGroup, gid)
		}
		s.uid, s.gid = int(uid), int(gid)
		return nil
	}
	return fmt.Errorf("%w: pod %s of SandboxTemplate %q has no container %q running outpost's shim (make the template with Provider.SandboxTemplate; docs/sandboxes/kubernetes.md)", ErrStart, pod.Name, s.p.opts.Template, containerName)
}

func deref(v *int64, def int64) int64 {
	if v == nil {
		return def
	}
	return *v
}

// hopelessClaim are the Ready reasons of a claim the controller will not
// satisfy by waiting.
var hopelessClaim = map[string]bool{
	"TemplateNotFound": true, "WarmPoolNotFound": true, "InvalidMetadata": true, "EnvVarsInjectionRejected": true,
	"VolumeClaimTemplatesError": true, extv1.ClaimExpiredReason: true, sandboxv1.SandboxReasonExpired: true,
	sandboxv1.SandboxReasonPodFailed: true, sandboxv1.SandboxReasonPodSucceeded: true,
}

// waitClaim waits until the claim is bound to a ready Sandbox and returns
// its pod's name (the Sandbox's), at most until deadline. Errors wrap
// ErrStart with the claim's condition, or are ctx's.
func (p *Provider) waitClaim(ctx context.Context, c *extv1.SandboxClaim, deadline time.Time) (string, error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	last := c
	for {
		if pod, err := p.claimDecided(last); pod != "" || err != nil {
			return pod, err
		}
		w, err := p.api.claims.watch(wctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", c.Name).String(), ResourceVersion: last.ResourceVersion})
		if err == nil {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Deleted {
					w.Stop()
					return "", fmt.Errorf("%w: SandboxClaim %s was deleted while starting", ErrStart, c.Name)
				}
				if cl, ok := ev.Object.(*extv1.SandboxClaim); ok {
					last = cl
					if pod, err := p.claimDecided(cl); pod != "" || err != nil {
						w.Stop()
						return pod, err
					}
				}
			}
			w.Stop()
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if wctx.Err() != nil {
			return "", fmt.Errorf("%w: SandboxClaim %s in namespace %s not ready after %v: %s", ErrStart, c.Name, p.ns, p.opts.StartTimeout, claimState(last))
		}
		if fresh, err := p.api.claims.get(wctx, c.Name); err == nil {
			last = fresh
		}
	}
}

// claimDecided: the claim's pod once it is ready, or why it never will be.
func (p *Provider) claimDecided(c *extv1.SandboxClaim) (string, error) {
	for _, cond := range c.Status.Conditions {
		if cond.Type != string(sandboxv1.SandboxConditionReady) {
			continue
		}
		if cond.Status == metav1.ConditionTrue && c.Status.SandboxStatus.Name != "" {
			return c.Status.SandboxStatus.Name, nil
		}
		if hopelessClaim[cond.Reason] {
			return "", fmt.Errorf("%w: SandboxClaim %s in namespace %s (template %q): %s", ErrStart, c.Name, p.ns, p.opts.Template, claimState(c))
		}
	}
	return "", nil
}

// claimState is a claim's Ready condition, for errors.
func claimState(c *extv1.SandboxClaim) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == string(sandboxv1.SandboxConditionReady) {
			return strings.TrimSpace(cond.Reason + ": " + cond.Message)
		}
	}
	return "no status from agent-sandbox's controller yet (is it running?)"
}

// deleteClaim deletes the lease's claim, if it made one (the
// controller's garbage then deletes its Sandbox and pod). One already
// gone is not an error.
func (s *Sandbox) deleteClaim(ctx context.Context) error {
	if !s.claim {
		return nil
	}
	bg := metav1.DeletePropagationBackground
	err := s.p.api.claims.delete(ctx, s.id, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return s.p.apiErr(ctx, "deleting SandboxClaim "+s.id, err)
	}
	return nil
}

// gcClaims deletes the claims whose owner Lease is not among live (and
// older than a Lease's duration) or is being collected (dead), listed in
// rep.Claims. Only in via=agent-sandbox (elsewhere the resource may not
// exist).
func (p *Provider) gcClaims(ctx context.Context, live, dead map[types.UID]bool, now time.Time, opts GCOptions, rep *GCReport) error {
	if !p.claimed() {
		return nil
	}
	var claims extv1.SandboxClaimList
	if err := p.api.claims.list(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=claim"}, &claims); err != nil {
		return p.apiErr(ctx, "listing outpost SandboxClaims", err)
	}
	var errs []error
	for _, c := range claims.Items {
		owned, gone := false, false
		for _, r := range c.OwnerReferences {
			if r.Kind == "Lease" {
				owned = owned || live[r.UID]
				gone = gone || dead[r.UID]
			}
		}
		orphan := !owned && now.Sub(c.CreationTimestamp.Time) > p.opts.LeaseDuration
		if !(orphan || gone) || c.DeletionTimestamp != nil {
			continue
		}
		if !opts.DryRun {
			uid := c.UID
			bg := metav1.DeletePropagationBackground
			err := p.api.claims.delete(ctx, c.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("kubernetes: deleting SandboxClaim %s: %w", c.Name, err))
				continue
			}
		}
		rep.Claims = append(rep.Claims, c.Name)
	}
	return errors.Join(errs...)
}
