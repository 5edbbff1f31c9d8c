package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outposthq/outpost/sandbox/driver"
)

// Labels and annotations on the provider's Leases and pods.
const (
	LabelPrefix = "outposthq.github.io/"
	// LabelManaged marks every object the provider makes.
	LabelManaged = "app.kubernetes.io/managed-by"
	managedBy    = "outpost"
	// LabelRole is "owner" on owner Leases, "sandbox" on pods.
	LabelRole = LabelPrefix + "role"
	// LabelLease is the lease id on a pod (also its name).
	LabelLease = LabelPrefix + "lease"
	// LabelOwner names a pod's owner Lease.
	LabelOwner = LabelPrefix + "owner"
	// Annotations: the owner process (host and pid), the outpost version.
	AnnotationHost    = LabelPrefix + "host"
	AnnotationPID     = LabelPrefix + "pid"
	AnnotationVersion = LabelPrefix + "version"
)

// owner is the provider's coordination.k8s.io Lease: renewed while the
// provider lives, the owner of every pod it makes.
type owner struct {
	p    *Provider
	name string
	uid  types.UID

	mu    sync.Mutex
	lease *coordv1.Lease
	lost  bool // deleted by someone else: its pods are gone

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ensureOwner returns the provider's owner Lease, creating it and starting
// its renewal on first use (and again after it was lost).
func (p *Provider) ensureOwner(ctx context.Context) (*owner, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owner != nil && !p.owner.isLost() {
		return p.owner, nil
	}
	host, _ := os.Hostname()
	now := metav1.NewMicroTime(time.Now())
	secs := int32(p.opts.LeaseDuration / time.Second)
	holder := host + "/" + strconv.Itoa(os.Getpid())
	l := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "outpost-owner-" + randomHex(6),
			Labels: map[string]string{LabelManaged: managedBy, LabelRole: "owner"},
			Annotations: map[string]string{
				AnnotationHost: host, AnnotationPID: strconv.Itoa(os.Getpid()), AnnotationVersion: version(),
			},
		},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
	}
	created, err := p.api.leases.create(ctx, l)
	if err != nil {
		return nil, p.apiErr(ctx, "creating the owner Lease", err)
	}
	o := &owner{p: p, name: created.Name, uid: created.UID, lease: created, stop: make(chan struct{}), done: make(chan struct{})}
	p.owner = o
	go o.renew()
	p.startSweeper()
	return o, nil
}

func (o *owner) isLost() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lost
}

// ref is the ownerReference of the provider's pods.
func (o *owner) ref() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: o.name, UID: o.uid}
}

// renew renews the Lease every third of its duration until release.
func (o *owner) renew() {
	defer close(o.done)
	every := o.p.opts.LeaseDuration / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := o.renewOnce(ctx)
		cancel()
		if apierrors.IsNotFound(err) {
			o.mu.Lock()
			o.lost = true
			o.mu.Unlock()
			return
		}
	}
}

func (o *owner) renewOnce(ctx context.Context) error {
	o.mu.Lock()
	l := o.lease.DeepCopy()
	o.mu.Unlock()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	updated, err := o.p.api.leases.update(ctx, l)
	if apierrors.IsConflict(err) {
		fresh, gerr := o.p.api.leases.get(ctx, o.name)
		if gerr != nil {
			return gerr
		}
		if fresh.UID != o.uid {
			return apierrors.NewNotFound(coordv1.Resource("leases"), o.name)
		}
		fresh.Spec.RenewTime = &now
		updated, err = o.p.api.leases.update(ctx, fresh)
	}
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.lease = updated
	o.mu.Unlock()
	return nil
}

// release stops the renewal and deletes the Lease (its pods, if any are
// left, with it).
func (o *owner) release() {
	o.stopOnce.Do(func() {
		close(o.stop)
		<-o.done
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		_ = o.p.api.leases.delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &o.uid}})
	})
}

// expiryMargin is how long past its renew deadline (renew time +
// duration) an owner Lease is still taken for alive: room for clock skew
// between its renewer and a sweeper, and for a late renewal.
const expiryMargin = 5 * time.Second

// expired reports whether an owner Lease is past its renew deadline and
// expiryMargin.
func expired(l *coordv1.Lease, now time.Time) bool {
	if l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	last := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		last = l.Spec.RenewTime.Time
	}
	return now.After(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second + expiryMargin))
}

// GCOptions configure GC.
type GCOptions struct {
	// All deletes every outpost owner Lease and pod of the namespace,
	// whatever their state (when all outposts using it are known gone).
	All bool
	// DryRun lists what would be deleted without deleting it.
	DryRun bool
}

// Collected is one owner Lease GC deleted (with its pods).
type Collected struct {
	Lease     string    `json:"lease"`
	Holder    string    `json:"holder,omitempty"`
	RenewedAt time.Time `json:"renewed_at,omitzero"`
	Pods      []string  `json:"pods,omitempty"`
	Deleted   bool      `json:"deleted"`
	Error     string    `json:"error,omitempty"`
}

// GCReport is what GC did.
type GCReport struct {
	Namespace string      `json:"namespace"`
	Leases    []Collected `json:"leases"`
	// Pods are outpost pods deleted on their own: ended (their deadline
	// passed) or owned by no Lease.
	Pods []string `json:"pods,omitempty"`
	// Claims are outpost SandboxClaims (via=agent-sandbox) deleted: of
	// the Leases deleted, or owned by no Lease.
	Claims []string `json:"claims,omitempty"`
	// Kept counts the owner Leases still renewed.
	Kept int `json:"kept"`
}

// GC deletes the owner Leases past their renew deadline and expiryMargin
// (all of them with GCOptions.All) and their pods, and outpost pods that
// ended or lost their owner. A Lease goes first, conditional on its
// resourceVersion (a Lease renewed since the list is kept), then its pods:
// their deletion does not wait for the cluster's garbage collector, which
// would also delete them (and a NetworkPolicy the Lease owns). It is what
// `outpost gc --sandbox kubernetes` runs, and what every provider runs
// every SweepPeriod from its first Open until Close (Sweeper).
func (p *Provider) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	rep := GCReport{Namespace: p.ns}
	// Pods first: the owner of a pod listed was made before it, so it is
	// in the list of Leases that follows, unless it is gone.
	var pods corev1.PodList
	if err := p.api.pods.list(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=sandbox"}, &pods); err != nil {
		return rep, p.apiErr(ctx, "listing outpost pods", err)
	}
	var leases coordv1.LeaseList
	if err := p.api.leases.list(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=owner"}, &leases); err != nil {
		return rep, p.apiErr(ctx, "listing owner Leases", err)
	}
	now := time.Now()
	live := map[types.UID]bool{}
	for _, l := range leases.Items {
		live[l.UID] = true
	}
	byOwner, errs := p.gcPods(ctx, pods.Items, live, now, opts, &rep)
	var mine types.UID
	p.mu.Lock()
	if p.owner != nil {
		mine = p.owner.uid
	}
	p.mu.Unlock()
	dead := map[types.UID]bool{}
	for _, l := range leases.Items {
		if l.UID == mine || (!opts.All && !expired(&l, now)) {
			rep.Kept++
			continue
		}
		c, kept, err := p.collectLease(ctx, &l, byOwner[l.UID], opts.DryRun)
		if err != nil {
			errs = append(errs, err)
		}
		if kept {
			rep.Kept++ // renewed meanwhile: alive
			continue
		}
		rep.Leases = append(rep.Leases, c)
		dead[l.UID], live[l.UID] = true, false
	}
	if err := p.gcClaims(ctx, live, dead, now, opts, &rep); err != nil {
		errs = append(errs, err)
	}
	sort.Slice(rep.Leases, func(i, j int) bool { return rep.Leases[i].RenewedAt.Before(rep.Leases[j].RenewedAt) })
	return rep, errors.Join(errs...)
}

// gcPods deletes the pods that ended or whose owner is not among live
// (listed in rep.Pods), and returns the others by owner Lease.
func (p *Provider) gcPods(ctx context.Context, pods []corev1.Pod, live map[types.UID]bool, now time.Time, opts GCOptions, rep *GCReport) (map[types.UID][]corev1.Pod, []error) {
	byOwner := map[types.UID][]corev1.Pod{}
	var errs []error
	for _, pod := range pods {
		owned := false
		for _, r := range pod.OwnerReferences {
			if r.Kind == "Lease" && live[r.UID] {
				byOwner[r.UID] = append(byOwner[r.UID], pod)
				owned = true
			}
		}
		ended := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		orphan := !owned && now.Sub(pod.CreationTimestamp.Time) > p.opts.LeaseDuration
		if (orphan || ended) && pod.DeletionTimestamp == nil {
			if !opts.DryRun {
				if err := p.deletePodOf(ctx, &pod); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			rep.Pods = append(rep.Pods, pod.Name)
		}
	}
	return byOwner, errs
}

// collectLease deletes an owner Lease that GC found expired, then its
// pods. kept: the Lease was renewed since the list (it is alive).
func (p *Provider) collectLease(ctx context.Context, l *coordv1.Lease, pods []corev1.Pod, dryRun bool) (c Collected, kept bool, err error) {
	c = Collected{Lease: l.Name}
	for _, pod := range pods {
		c.Pods = append(c.Pods, pod.Name)
	}
	if l.Spec.HolderIdentity != nil {
		c.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		c.RenewedAt = l.Spec.RenewTime.Time
	}
	if dryRun {
		return c, false, nil
	}
	bg := metav1.DeletePropagationBackground
	uid, rv := l.UID, l.ResourceVersion
	err = p.api.leases.delete(ctx, l.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		c.Deleted = true
	case apierrors.IsConflict(err):
		return c, true, nil
	default:
		c.Error = err.Error()
		return c, false, fmt.Errorf("kubernetes: deleting Lease %s: %w", l.Name, err)
	}
	var errs []error
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil {
			errs = append(errs, p.deletePodOf(ctx, &pod))
		}
	}
	return c, false, errors.Join(errs...)
}

// deletePodOf deletes an outpost pod GC found (conditional on its UID:
// not a pod made since under the same name); gone already is done.
func (p *Provider) deletePodOf(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	err := p.api.pods.delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: deleting pod %s: %w", pod.Name, err)
	}
	return nil
}

// SweepPeriod is how often a provider runs GC, from its first Open until
// Close: a third of lease_duration. With it, the pods of an outpost that
// died are deleted at most SweepBound after its death.
func (p *Provider) SweepPeriod() time.Duration { return p.opts.LeaseDuration / 3 }

// SweepBound is how long after an outpost process died its owner Lease
// and its pods are deleted at most, as long as one provider on the
// namespace lives: the Lease's duration (its last renewal was at most
// then), expiryMargin, and one SweepPeriod; then the pods' deletion by
// their node (a grace period of 0, the kubelet's reaction).
func (p *Provider) SweepBound() time.Duration {
	return p.opts.LeaseDuration + expiryMargin + p.SweepPeriod()
}

var _ driver.Sweeper = (*Provider)(nil)

// Sweep starts the periodic GC now rather than with the provider's first
// owner Lease. It implements driver.Sweeper.
func (p *Provider) Sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startSweeper()
}

// startSweeper starts the periodic GC once per provider: a sweep at once,
// then every SweepPeriod until Close. Its failures are left to `outpost
// gc` to report. Call with p.mu held.
func (p *Provider) startSweeper() {
	if p.sweepStop != nil || p.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.sweepStop, p.sweepDone = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		t := time.NewTicker(p.SweepPeriod())
		defer t.Stop()
		for {
			gctx, gcancel := context.WithTimeout(ctx, p.SweepPeriod())
			_, _ = p.GC(gctx, GCOptions{})
			gcancel()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}(p.sweepDone)
}

// stopSweeper stops the periodic GC and waits for it. Call without p.mu.
func (p *Provider) stopSweeper() {
	p.mu.Lock()
	stop, done := p.sweepStop, p.sweepDone
	p.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Collect implements driver.Collector: GC, its report also in the
// portable form `outpost gc` prints. A Lease's pods are not listed apart:
// they go with it (GCReport lists them under their Lease).
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	rep, err := p.GC(ctx, GCOptions{All: opts.All, DryRun: opts.DryRun})
	col := driver.Collection{Where: "namespace " + p.ns, Kept: rep.Kept, Report: rep}
	for _, l := range rep.Leases {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "lease", Name: l.Lease, Owner: l.Holder, Removed: l.Deleted, Error: l.Error})
	}
	for _, pod := range rep.Pods {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "pod", Name: pod, Removed: !opts.DryRun})
	}
	for _, c := range rep.Claims {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "sandboxclaim", Name: c, Removed: !opts.DryRun})
	}
	return col, err
}
