package kubernetes

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

const sweepNS = "agents"

// ownerLease is an owner Lease of another outpost, last renewed at renewed.
func ownerLease(name string, renewed time.Time, secs int32) *coordv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sweepNS, UID: types.UID("uid-" + name),
			Labels: map[string]string{LabelManaged: managedBy, LabelRole: "owner"}},
		Spec: coordv1.LeaseSpec{LeaseDurationSeconds: &secs, RenewTime: &t},
	}
}

// sandboxPod is a running sandbox pod owned by Lease l.
func sandboxPod(name string, l *coordv1.Lease) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sweepNS, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.Now(),
			Labels:            map[string]string{LabelManaged: managedBy, LabelRole: "sandbox", LabelOwner: l.Name},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: l.Name, UID: l.UID}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// deleted reads w until the objects named in want are all deleted (ctx
// bounds the wait) and returns the names seen deleted.
func deleted(ctx context.Context, t *testing.T, w watch.Interface, want ...string) []string {
	t.Helper()
	left := map[string]bool{}
	for _, n := range want {
		left[n] = true
	}
	var seen []string
	for len(left) > 0 {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Deleted {
				continue
			}
			n := ev.Object.(metav1.Object).GetName()
			seen = append(seen, n)
			delete(left, n)
		case <-ctx.Done():
			t.Fatalf("still there: %v (deleted: %v)", left, seen)
		}
	}
	sort.Strings(seen)
	return seen
}

func names[T any](items []T, name func(*T) string) []string {
	var out []string
	for i := range items {
		out = append(out, name(&items[i]))
	}
	sort.Strings(out)
	return out
}

// TestSweeper: from its first owner Lease until Close, a provider deletes,
// every SweepPeriod, the owner Leases of other outposts past their renew
// deadline and expiryMargin, and their pods itself (the fake clientset,
// like a cluster whose garbage collector lags, deletes no dependent):
// those there at the start, and those that die later, when no Open
// comes. A renewed Lease and its pod stay.
func TestSweeper(t *testing.T) {
	now := time.Now()
	dead := ownerLease("outpost-owner-dead", now.Add(-time.Hour), 3)
	alive := ownerLease("outpost-owner-alive", now.Add(time.Hour), 3)
	cs := fake.NewClientset(dead, alive,
		sandboxPod("outpost-dead1", dead), sandboxPod("outpost-dead2", dead), sandboxPod("outpost-alive", alive))
	p := &Provider{opts: Options{LeaseDuration: 3 * time.Second}, cs: cs, ns: sweepNS}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pw, err := cs.CoreV1().Pods(sweepNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()
	lw, err := cs.CoordinationV1().Leases(sweepNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Stop()

	if _, err := p.ensureOwner(ctx); err != nil { // what Open does first
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"outpost-dead1", "outpost-dead2"}, deleted(ctx, t, pw, "outpost-dead1", "outpost-dead2")); diff != "" {
		t.Errorf("pods deleted by the first sweep (-want +got):\n%s", diff)
	}
	deleted(ctx, t, lw, dead.Name)

	// An outpost dies after the first sweep, and no Open follows: the
	// timer's sweep deletes its Lease and pod.
	later := ownerLease("outpost-owner-later", now.Add(-time.Hour), 3)
	if _, err := cs.CoordinationV1().Leases(sweepNS).Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(sweepNS).Create(ctx, sandboxPod("outpost-later", later), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted(ctx, t, pw, "outpost-later")
	deleted(ctx, t, lw, later.Name)

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.sweepDone:
	default:
		t.Error("the sweeper still runs after Close")
	}
	pods, err := cs.CoreV1().Pods(sweepNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"outpost-alive"}, names(pods.Items, func(p *corev1.Pod) string { return p.Name })); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
	leases, err := cs.CoordinationV1().Leases(sweepNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The provider's own Lease went with Close.
	if diff := cmp.Diff([]string{alive.Name}, names(leases.Items, func(l *coordv1.Lease) string { return l.Name })); diff != "" {
		t.Errorf("Leases left (-want +got):\n%s", diff)
	}
}

// TestExpired: a Lease is expired only past its renew time, its duration
// and expiryMargin.
func TestExpired(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		renewed time.Time
		want    bool
	}{
		{"renewed now", now, false},
		{"within the duration", now.Add(-2 * time.Second), false},
		{"past the duration, within the margin", now.Add(-10*time.Second - expiryMargin/2), false},
		{"past the duration and the margin", now.Add(-10*time.Second - expiryMargin - time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := expired(ownerLease("l", tc.renewed, 10), now); got != tc.want {
				t.Errorf("expired = %v, want %v", got, tc.want)
			}
		})
	}
}
