package kubernetes

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

const deployDir = "../../deploy/kubernetes"

// deployObjects decodes, strictly (unknown fields fail), every document
// of data.
func deployObjects(t *testing.T, data []byte) []runtime.Object {
	t.Helper()
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		out = append(out, obj)
	}
}

// deployManifests are the objects of deploy/kubernetes: `kubectl
// kustomize` of it when kubectl is at hand, and its resources read one by
// one in any case (the two must agree).
func deployManifests(t *testing.T) []runtime.Object {
	t.Helper()
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k8syaml.Unmarshal(b, &k); err != nil || k.Namespace == "" || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v %+v", err, k)
	}
	var objs []runtime.Object
	for _, f := range k.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, deployObjects(t, b)...)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Logf("no kubectl on PATH: `kubectl kustomize %s` not run (the files were checked one by one)", deployDir)
		return objs
	}
	out, err := exec.Command(kubectl, "kustomize", deployDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	built := deployObjects(t, out)
	if len(built) != len(objs) {
		t.Fatalf("kubectl kustomize gave %d objects, the resources %d", len(built), len(objs))
	}
	for _, o := range built {
		if ns := o.(interface{ GetNamespace() string }).GetNamespace(); ns != k.Namespace {
			t.Errorf("%T is in namespace %q, want %q", o, ns, k.Namespace)
		}
	}
	return built
}

func pick[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("deploy/kubernetes has no %T", zero)
	return zero
}

// TestDeployManifests holds deploy/kubernetes to what docs/serve.md says
// of it: two replicas of `outpost serve --listen` on the ServiceAccount
// bound to exactly the provider's Role, tokens and the store's URL from
// the Secret, readiness on /healthz (liveness not: a draining replica
// answers 503), a grace period longer than --grace, a Service and a
// PodDisruptionBudget that select the pods.
func TestDeployManifests(t *testing.T) {
	objs := deployManifests(t)
	var err error
	d := pick[*appsv1.Deployment](t, objs)
	pod := d.Spec.Template
	c := pod.Spec.Containers[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if len(c.Args) < 2 || c.Args[0] != "serve" || !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--listen=") }) {
		t.Errorf("args %q: want serve --listen", c.Args)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("readiness probe %+v: want GET /healthz", p)
	}
	if p := c.LivenessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/healthz" {
		t.Error("the liveness probe is /healthz: a draining replica (503) would be killed")
	}
	var store *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == "OUTPOST_STORE" && e.ValueFrom != nil {
			store = e.ValueFrom.SecretKeyRef
		}
	}
	if store == nil {
		t.Fatal("OUTPOST_STORE does not come from a Secret")
	}
	tokens := ""
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == store.Name {
			tokens = v.Name
		}
	}
	// The Secret's file is copied by an init container into the state
	// volume (serve refuses a tokens file that is not its user's own).
	copied := false
	for _, ic := range pod.Spec.InitContainers {
		if slices.ContainsFunc(ic.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == tokens }) &&
			strings.Contains(strings.Join(ic.Command, " "), "/var/lib/outpost/tokens/serve-tokens") {
			copied = true
		}
	}
	if tokens == "" || !copied || !slices.Contains(c.Args, "--tokens=/var/lib/outpost/tokens/serve-tokens") {
		t.Errorf("the tokens file is not --tokens copied from the Secret %s", store.Name)
	}
	grace := 30 * time.Second // serve's default
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--grace="); ok {
			if grace, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if p := pod.Spec.TerminationGracePeriodSeconds; p == nil || time.Duration(*p)*time.Second <= grace {
		t.Errorf("terminationGracePeriodSeconds is not longer than --grace %v", grace)
	}

	role := pick[*rbacv1.Role](t, objs)
	want := deployObjects(t, RoleYAML)[0].(*rbacv1.Role)
	if diff := cmp.Diff(want.Rules, role.Rules); diff != "" {
		t.Errorf("deploy/kubernetes/role.yaml differs from providers/kubernetes/rbac.yaml (-want +got):\n%s", diff)
	}
	rb := pick[*rbacv1.RoleBinding](t, objs)
	sa := pick[*corev1.ServiceAccount](t, objs)
	if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the Role %s is not bound to the pods' ServiceAccount %s: %+v", role.Name, pod.Spec.ServiceAccountName, rb)
	}

	labels := pod.Labels
	svc := pick[*corev1.Service](t, objs)
	if !selects(svc.Spec.Selector, labels) || svc.Spec.Ports[0].TargetPort != intstr.FromString(c.Ports[0].Name) {
		t.Errorf("the Service does not reach the pods' port: %+v", svc.Spec)
	}
	pdb := pick[*policyv1.PodDisruptionBudget](t, objs)
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, labels) || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("the PodDisruptionBudget does not keep a replica of the pods: %+v", pdb.Spec)
	}
	if !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, labels)
	}
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
