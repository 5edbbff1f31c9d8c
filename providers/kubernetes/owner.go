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
	created, err := p.cs.CoordinationV1().Leases(p.ns).Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		return nil, p.apiErr(ctx, "creating the owner Lease", err)
	}
	o := &owner{p: p, name: created.Name, uid: created.UID, lease: created, stop: make(chan struct{}), done: make(chan struct{})}
	p.owner = o
	go o.renew()
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
	updated, err := o.p.cs.CoordinationV1().Leases(o.p.ns).Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		fresh, gerr := o.p.cs.CoordinationV1().Leases(o.p.ns).Get(ctx, o.name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if fresh.UID != o.uid {
			return apierrors.NewNotFound(coordv1.Resource("leases"), o.name)
		}
		fresh.Spec.RenewTime = &now
		updated, err = o.p.cs.CoordinationV1().Leases(o.p.ns).Update(ctx, fresh, metav1.UpdateOptions{})
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
		_ = o.p.cs.CoordinationV1().Leases(o.p.ns).Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &o.uid}})
	})
}

// expired reports whether an owner Lease is past its renew deadline.
func expired(l *coordv1.Lease, now time.Time) bool {
	if l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	last := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		last = l.Spec.RenewTime.Time
	}
	return now.After(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
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
	// Kept counts the owner Leases still renewed.
	Kept int `json:"kept"`
}

// GC deletes the owner Leases past their renew deadline (all of them with
// GCOptions.All) — the cluster's garbage collector then deletes their
// pods — and outpost pods that ended or lost their owner. It is what
// `outpost gc --sandbox kubernetes` runs, and what every provider does
// (without All) on its first Open and at most once a minute after.
func (p *Provider) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	rep := GCReport{Namespace: p.ns}
	// Pods first: the owner of a pod listed was made before it, so it is
	// in the list of Leases that follows, unless it is gone.
	pods, err := p.cs.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=sandbox"})
	if err != nil {
		return rep, p.apiErr(ctx, "listing outpost pods", err)
	}
	leases, err := p.cs.CoordinationV1().Leases(p.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=owner"})
	if err != nil {
		return rep, p.apiErr(ctx, "listing owner Leases", err)
	}
	now := time.Now()
	byOwner := map[types.UID][]string{}
	live := map[types.UID]bool{}
	for _, l := range leases.Items {
		live[l.UID] = true
	}
	var errs []error
	bg := metav1.DeletePropagationBackground
	var mine types.UID
	p.mu.Lock()
	if p.owner != nil {
		mine = p.owner.uid
	}
	p.mu.Unlock()
	for _, pod := range pods.Items {
		owned := false
		for _, r := range pod.OwnerReferences {
			if r.Kind == "Lease" && live[r.UID] {
				byOwner[r.UID] = append(byOwner[r.UID], pod.Name)
				owned = true
			}
		}
		ended := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		orphan := !owned && now.Sub(pod.CreationTimestamp.Time) > p.opts.LeaseDuration
		if (orphan || ended) && pod.DeletionTimestamp == nil {
			if !opts.DryRun {
				if err := p.cs.CoreV1().Pods(p.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("kubernetes: deleting pod %s: %w", pod.Name, err))
					continue
				}
			}
			rep.Pods = append(rep.Pods, pod.Name)
		}
	}
	for _, l := range leases.Items {
		if l.UID == mine || (!opts.All && !expired(&l, now)) {
			rep.Kept++
			continue
		}
		c := Collected{Lease: l.Name, Pods: byOwner[l.UID]}
		if l.Spec.HolderIdentity != nil {
			c.Holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil {
			c.RenewedAt = l.Spec.RenewTime.Time
		}
		if !opts.DryRun {
			// The preconditions keep a Lease renewed since the list.
			uid, rv := l.UID, l.ResourceVersion
			err := p.cs.CoordinationV1().Leases(p.ns).Delete(ctx, l.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
			switch {
			case err == nil || apierrors.IsNotFound(err):
				c.Deleted = true
			case apierrors.IsConflict(err):
				rep.Kept++ // renewed meanwhile: alive
				continue
			default:
				c.Error = err.Error()
				errs = append(errs, fmt.Errorf("kubernetes: deleting Lease %s: %w", l.Name, err))
			}
		}
		rep.Leases = append(rep.Leases, c)
	}
	sort.Slice(rep.Leases, func(i, j int) bool { return rep.Leases[i].RenewedAt.Before(rep.Leases[j].RenewedAt) })
	return rep, errors.Join(errs...)
}

// sweepInterval bounds how often a provider sweeps on Open.
const sweepInterval = time.Minute

// sweep runs GC on the first Open and at most once per sweepInterval
// after; its failures are left to `outpost gc` to report.
func (p *Provider) sweep(ctx context.Context) {
	p.mu.Lock()
	due := time.Since(p.swept) > sweepInterval
	if due {
		p.swept = time.Now()
	}
	p.mu.Unlock()
	if due {
		_, _ = p.GC(ctx, GCOptions{})
	}
}

// Collect implements driver.Collector: GC, its report also in the
// portable form `outpost gc` prints. A Lease's pods are not listed: the
// cluster's garbage collector deletes them with it.
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	rep, err := p.GC(ctx, GCOptions{All: opts.All, DryRun: opts.DryRun})
	col := driver.Collection{Where: "namespace " + p.ns, Kept: rep.Kept, Report: rep}
	for _, l := range rep.Leases {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "lease", Name: l.Lease, Owner: l.Holder, Removed: l.Deleted, Error: l.Error})
	}
	for _, pod := range rep.Pods {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "pod", Name: pod, Removed: !opts.DryRun})
	}
	return col, err
}
