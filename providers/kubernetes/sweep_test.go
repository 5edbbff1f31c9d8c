package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
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

// The resources the API server of trackerServer serves.
var (
	podsGVR   = corev1.SchemeGroupVersion.WithResource("pods")
	leasesGVR = coordv1.SchemeGroupVersion.WithResource("leases")
	kinds     = map[schema.GroupVersionResource]schema.GroupVersionKind{
		podsGVR:   corev1.SchemeGroupVersion.WithKind("Pod"),
		leasesGVR: coordv1.SchemeGroupVersion.WithKind("Lease"),
	}
)

// trackerServer is an API server of pods and Leases over tr (client-go's
// fake object store), which the provider reaches through its own REST
// clients, over HTTP, as a cluster. Like a cluster whose garbage
// collector lags, it deletes no dependent; it ignores preconditions.
func trackerServer(t *testing.T, tr clienttesting.ObjectTracker) *rest.Config {
	enc := apiCodecs().codecs.LegacyCodec(corev1.SchemeGroupVersion, coordv1.SchemeGroupVersion)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /api/v1/namespaces/NS/pods[/NAME], /apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]
		_, tail, _ := strings.Cut(r.URL.Path, "/namespaces/")
		parts := append(strings.Split(tail, "/"), "", "")
		ns, name := parts[0], parts[2]
		var gvr schema.GroupVersionResource
		for g := range kinds {
			if g.Resource == parts[1] && strings.Contains(r.URL.Path, "/"+g.GroupVersion().String()+"/") {
				gvr = g
			}
		}
		obj, err := serveTracker(tr, r, gvr, ns, name)
		var st apierrors.APIStatus
		switch {
		case gvr.Empty():
			st = apierrors.NewNotFound(schema.GroupResource{Resource: parts[1]}, name)
		case errors.As(err, &st):
		case err != nil:
			st = apierrors.NewInternalError(err)
		case obj == nil:
			st = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusOK}}
		}
		w.Header().Set("Content-Type", runtime.ContentTypeJSON)
		if st != nil {
			s := st.Status()
			s.Kind, s.APIVersion = "Status", "v1"
			w.WriteHeader(int(s.Code))
			_ = json.NewEncoder(w).Encode(s)
			return
		}
		_ = enc.Encode(obj, w)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, QPS: 50, Burst: 100}
}

// serveTracker does what r asks of tr: the object to answer, or nil for
// a success without one.
func serveTracker(tr clienttesting.ObjectTracker, r *http.Request, gvr schema.GroupVersionResource, ns, name string) (runtime.Object, error) {
	switch {
	case r.Method == http.MethodGet && name != "":
		return tr.Get(gvr, ns, name)
	case r.Method == http.MethodGet:
		list, err := tr.List(gvr, kinds[gvr], ns)
		if err != nil {
			return nil, err
		}
		sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		items = slices.DeleteFunc(items, func(o runtime.Object) bool {
			m, _ := meta.Accessor(o)
			return !sel.Matches(labels.Set(m.GetLabels()))
		})
		return list, meta.SetList(list, items)
	case r.Method == http.MethodDelete:
		return nil, tr.Delete(gvr, ns, name)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	obj, err := runtime.Decode(apiCodecs().codecs.UniversalDeserializer(), body)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if r.Method == http.MethodPut {
		return obj, tr.Update(gvr, obj, ns)
	}
	return obj, tr.Create(gvr, obj, ns)
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
// deadline and expiryMargin, and their pods itself (trackerServer, like
// a cluster whose garbage collector lags, deletes no dependent):
// those there at the start, and those that die later, when no Open
// comes. A renewed Lease and its pod stay.
func TestSweeper(t *testing.T) {
	now := time.Now()
	dead := ownerLease("outpost-owner-dead", now.Add(-time.Hour), 3)
	alive := ownerLease("outpost-owner-alive", now.Add(time.Hour), 3)
	tr := clienttesting.NewObjectTracker(apiCodecs().scheme, apiCodecs().codecs.UniversalDecoder())
	for _, o := range []runtime.Object{dead, alive, sandboxPod("outpost-dead1", dead), sandboxPod("outpost-dead2", dead), sandboxPod("outpost-alive", alive)} {
		if err := tr.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	a, err := newAPI(trackerServer(t, tr), sweepNS)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{opts: Options{LeaseDuration: 3 * time.Second}, api: a, ns: sweepNS}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pw, err := tr.Watch(podsGVR, sweepNS)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()
	lw, err := tr.Watch(leasesGVR, sweepNS)
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
	if err := tr.Create(leasesGVR, later, sweepNS); err != nil {
		t.Fatal(err)
	}
	if err := tr.Create(podsGVR, sandboxPod("outpost-later", later), sweepNS); err != nil {
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
	var pods corev1.PodList
	if err := a.pods.list(ctx, metav1.ListOptions{}, &pods); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"outpost-alive"}, names(pods.Items, func(p *corev1.Pod) string { return p.Name })); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
	var leases coordv1.LeaseList
	if err := a.leases.list(ctx, metav1.ListOptions{}, &leases); err != nil {
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

// TestAPI: the provider's REST clients send the calls as client-go's
// typed clients do (names, bodies, a label selector as a query parameter)
// and give the API server's refusals as *StatusError, so that
// apierrors.IsNotFound and the like keep classifying them.
func TestAPI(t *testing.T) {
	l := ownerLease("outpost-owner-a", time.Now(), 3)
	tr := clienttesting.NewObjectTracker(apiCodecs().scheme, apiCodecs().codecs.UniversalDecoder())
	for _, o := range []runtime.Object{l, sandboxPod("outpost-a", l)} {
		if err := tr.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	a, err := newAPI(trackerServer(t, tr), sweepNS)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	got, err := a.leases.get(ctx, l.Name)
	if err != nil || got.Name != l.Name || *got.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("get = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"get of a missing Lease", func() error { _, err := a.leases.get(ctx, "missing"); return err }(), apierrors.IsNotFound},
		{"create of an existing pod", func() error { _, err := a.pods.create(ctx, sandboxPod("outpost-a", l)); return err }(), apierrors.IsAlreadyExists},
		{"update of a missing Lease", func() error { _, err := a.leases.update(ctx, ownerLease("missing", time.Now(), 3)); return err }(), apierrors.IsNotFound},
		{"delete of a missing pod", a.pods.delete(ctx, "missing", metav1.DeleteOptions{}), apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.is(tc.err) {
				t.Errorf("error %v (%T)", tc.err, tc.err)
			}
		})
	}
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{LabelRole + "=sandbox", []string{"outpost-a"}},
		{LabelRole + "=owner", nil},
	} {
		var pods corev1.PodList
		if err := a.pods.list(ctx, metav1.ListOptions{LabelSelector: tc.selector}, &pods); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, names(pods.Items, func(p *corev1.Pod) string { return p.Name })); diff != "" {
			t.Errorf("pods of %s (-want +got):\n%s", tc.selector, diff)
		}
	}
}
