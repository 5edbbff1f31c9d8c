package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	authv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// kubeconfig writes a kubeconfig for a server that is never contacted.
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "not-a-secret"}
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: agents}
current-context: ctx
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseSettings(t *testing.T) {
	o, err := ParseSettings(map[string]string{
		"kubeconfig": "/k", "context": "c", "namespace": "n", "image": "i:1", "outpost_image": "o:1", "pull": "never",
		"service_account": "sa", "node_selector": "a=b, c=d", "user": "2000:3000", "cpu": "1", "memory": "1Gi",
		"cpu_request": "10m", "memory_request": "16Mi", "ephemeral_storage": "none", "readonly": "true",
		"start_timeout": "30s", "lease_duration": "10s", "max_lifetime": "1h", "node_cache": "true", "binary": "/b", "arch": "arm64", "exec_each": "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Kubeconfig: "/k", Context: "c", Namespace: "n", Image: "i:1", OutpostImage: "o:1", Pull: PullNever,
		ServiceAccount: "sa", NodeSelector: map[string]string{"a": "b", "c": "d"}, UID: 2000, GID: 3000, CPU: "1", Memory: "1Gi",
		CPURequest: "10m", MemoryRequest: "16Mi", Storage: "none", ReadOnly: true, StartTimeout: 30 * time.Second,
		LeaseDuration: 10 * time.Second, MaxLifetime: time.Hour, NodeCache: true, Binary: "/b", Arch: "arm64", ExecEach: true}
	if diff := cmp.Diff(want, *o); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []map[string]string{{"colour": "red"}, {"user": "0"}, {"user": "x"}, {"readonly": "perhaps"},
		{"node_selector": "novalue"}, {"start_timeout": "-1s"}, {"lease_duration": "soon"}, {"memory": "4 gigs"}} {
		if _, err := ParseSettings(bad); outpost.CodeOf(err) != outpost.Configuration {
			t.Errorf("ParseSettings(%v): %v, want a configuration error", bad, err)
		}
	}
}

func TestNew(t *testing.T) {
	kc := kubeconfig(t)
	p, err := New(&Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace() != "agents" || p.host != "https://127.0.0.1:1" {
		t.Errorf("namespace %q host %q", p.Namespace(), p.host)
	}
	if p, err := New(&Options{Kubeconfig: kc, Namespace: "other"}); err != nil || p.Namespace() != "other" {
		t.Errorf("namespace override: %v", err)
	}
	for _, bad := range []Options{
		{Kubeconfig: "/nonexistent"},
		{Kubeconfig: kc, Context: "nope"},
		{Kubeconfig: kc, Pull: "sometimes"},
		{Kubeconfig: kc, CPU: "lots"},
		{Kubeconfig: kc, LeaseDuration: time.Second},
		{Kubeconfig: kc, Via: "operator"},
		{Kubeconfig: kc, Via: ViaAgentSandbox},       // no template
		{Kubeconfig: kc, Template: "t"},              // a template without via=agent-sandbox
		{Kubeconfig: kc, Via: ViaPod, WarmPool: "w"}, // nor a pool
	} {
		if _, err := New(&bad); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", bad, err)
		}
	}
}

// TestPodHardening: the pod of a lease has every hardening the docs
// promise, and its owner is the provider's Lease.
func TestPodHardening(t *testing.T) {
	p, err := New(&Options{Kubeconfig: kubeconfig(t), ReadOnly: true, NodeSelector: map[string]string{"pool": "agents"}, ServiceAccount: "agent", NodeCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{p: p, id: "outpost-0123456789ab", host: "h"}
	s.shared = sharedMounts(&p.opts, []driver.Mount{{Source: "/cache/trees", Target: "/opt/outpost/bootstrap"}, {Source: "/x", Target: "/workspace/x"}, {Source: "rel", Target: "/y"}})
	o := &owner{name: "outpost-owner-1", uid: "uid-1"}
	pod := p.podSpec(s, "outpost/outpost:abc", o, map[string]string{"team": "a", "bad key!": "x"})
	spec := pod.Spec
	if *spec.AutomountServiceAccountToken || *spec.EnableServiceLinks || spec.ServiceAccountName != "agent" || spec.NodeSelector["pool"] != "agents" {
		t.Errorf("pod spec %+v", spec)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || *spec.ActiveDeadlineSeconds != int64(DefaultMaxLifetime/time.Second) {
		t.Errorf("restart %s, deadline %d", spec.RestartPolicy, *spec.ActiveDeadlineSeconds)
	}
	if psc := spec.SecurityContext; !*psc.RunAsNonRoot || *psc.RunAsUser != 1000 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || *sc.Privileged || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
		if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse(DefaultMemory)) != 0 {
			t.Errorf("container %s memory limit %v", c.Name, q.String())
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceEphemeralStorage} {
			if _, ok := c.Resources.Limits[r]; !ok {
				t.Errorf("container %s has no %s limit", c.Name, r)
			}
		}
	}
	if got := spec.Containers[0].Command; !cmp.Equal(got, []string{layout.BinaryPath, "sandbox-shim", "init"}) {
		t.Errorf("command %v", got)
	}
	vols := map[string]corev1.VolumeSource{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v.VolumeSource
	}
	if vols["state"].EmptyDir == nil || vols["workspace"].EmptyDir == nil || vols["tmp"].EmptyDir == nil {
		t.Errorf("volumes %+v", spec.Volumes)
	}
	if hp := vols["node-cache-0"].HostPath; hp == nil || hp.Path != "/cache/trees" || len(s.shared) != 1 {
		t.Errorf("node cache volume %+v (shared %v)", hp, s.shared)
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "node-cache-0" && (!m.ReadOnly || m.MountPath != "/opt/outpost/bootstrap") {
			t.Errorf("node cache mount %+v", m)
		}
	}
	if got, ok := s.HostPath("/cache/trees/claude@1/bin/claude"); !ok || got != "/opt/outpost/bootstrap/claude@1/bin/claude" {
		t.Errorf("HostPath: %q %v", got, ok)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Lease" || pod.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("owners %+v", pod.OwnerReferences)
	}
	if pod.Labels["team"] != "a" || pod.Labels[LabelLease] != s.id || pod.Labels[LabelOwner] != o.name || pod.Labels["bad key!"] != "" {
		t.Errorf("labels %v", pod.Labels)
	}
}

func TestRoleYAML(t *testing.T) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(RoleYAML, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	role, ok := obj.(*rbacv1.Role)
	if !ok {
		t.Fatalf("rbac.yaml holds a %T", obj)
	}
	// Every permission Preflight checks is granted (via=agent-sandbox's too).
	for _, n := range append(append([]authv1.ResourceAttributes{}, needed...), neededClaims...) {
		granted := false
		for _, r := range role.Rules {
			res := n.Resource
			if n.Subresource != "" {
				res += "/" + n.Subresource
			}
			if contains(r.APIGroups, n.Group) && contains(r.Resources, res) && contains(r.Verbs, n.Verb) {
				granted = true
			}
		}
		if !granted {
			t.Errorf("the Role does not grant %+v", n)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func TestCheckArchive(t *testing.T) {
	mk := func(hs ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
		}
		tw.Close()
		return b.Bytes()
	}
	for name, a := range map[string][]byte{
		"dotdot": mk(&tar.Header{Name: "../x", Typeflag: tar.TypeReg}),
		"chain":  mk(&tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "."}, &tar.Header{Name: "a/x", Typeflag: tar.TypeReg}),
	} {
		if err := workspace.CheckArchive(bytes.NewReader(a), &bytes.Buffer{}); !errors.Is(err, tarsafe.ErrUnsafe) {
			t.Errorf("%s: %v, want ErrUnsafe", name, err)
		}
	}
	if err := workspace.CheckArchive(bytes.NewReader(mk(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})), &bytes.Buffer{}); err != nil {
		t.Errorf("a safe archive: %v", err)
	}
}

func TestOutpostImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outpost")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	ref, err := WriteOutpostImage(&b, bin, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := OutpostImageRef(bin); ref != want || !strings.HasPrefix(ref, OutpostImageRepo+":") {
		t.Errorf("ref %q, want %q", ref, want)
	}
	files, err := tarsafe.Read(&b, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if len(names) != 3 || names[0] != "manifest.json" || names[2] != "layer.tar" {
		t.Errorf("archive %v", names)
	}
}

// TestImagePullHint: a pod whose nodes cannot pull the outpost image fails
// naming the command that makes that image; other pull failures do not.
func TestImagePullHint(t *testing.T) {
	p, err := New(&Options{Kubeconfig: kubeconfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		container, reason string
		hint              bool
	}{
		{initName, "ImagePullBackOff", true},
		{initName, "ErrImagePull", true},
		{initName, "ErrImageNeverPull", true},
		{containerName, "ImagePullBackOff", false}, // the agent's own image (--image)
		{initName, "CreateContainerError", false},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "outpost-x"}}
		st := []corev1.ContainerStatus{{Name: tc.container, Image: "outpost/outpost:0123456789ab", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: tc.reason, Message: "not found"}}}}
		if tc.container == initName {
			pod.Status.InitContainerStatuses = st
		} else {
			pod.Status.ContainerStatuses = st
		}
		msg := p.startErr(context.Background(), pod, "").Error()
		if got := strings.Contains(msg, "outpost kubernetes image --arch ARCH -o outpost-image.tar") && strings.Contains(msg, "outpost/outpost:0123456789ab"); got != tc.hint {
			t.Errorf("%s %s: hint %v, want %v: %s", tc.container, tc.reason, got, tc.hint, msg)
		}
	}
}

// TestAgentSandboxSettings: via=agent-sandbox and its template and pool
// parse into Options; the template of Provider.SandboxTemplate is the
// provider's hardened pod without a lease's identity or lifetime, and
// leaves the network policy to the provider; a lease's claim names the
// pool, is owned by the owner Lease and bounded by max_lifetime.
func TestAgentSandboxSettings(t *testing.T) {
	o, err := ParseSettings(map[string]string{"via": "agent-sandbox", "template": "tpl", "warm_pool": "wp"})
	if err != nil || o.Via != ViaAgentSandbox || o.Template != "tpl" || o.WarmPool != "wp" {
		t.Fatalf("ParseSettings: %+v %v", o, err)
	}
	if _, err := ParseSettings(map[string]string{"via": "operator"}); outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("via=operator: %v, want a configuration error", err)
	}
	o.Kubeconfig, o.OutpostImage = kubeconfig(t), "outpost/outpost:test"
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.needed()) != len(needed)+len(neededClaims) {
		t.Errorf("Preflight checks %d rights in via=agent-sandbox", len(p.needed()))
	}
	tmpl, err := p.SandboxTemplate(context.Background(), "tpl")
	if err != nil {
		t.Fatal(err)
	}
	spec := tmpl.Spec.PodTemplate.Spec
	if tmpl.Name != "tpl" || tmpl.Kind != extv1.SandboxTemplateKind || tmpl.Spec.NetworkPolicyManagement != extv1.NetworkPolicyManagementUnmanaged {
		t.Errorf("template %+v", tmpl.ObjectMeta)
	}
	if spec.ActiveDeadlineSeconds != nil || len(spec.Containers) != 1 || spec.Containers[0].Name != containerName ||
		len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "outpost/outpost:test" ||
		spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("template pod %+v", spec)
	}
	if _, ok := tmpl.Spec.PodTemplate.ObjectMeta.Labels[LabelRole]; ok {
		t.Error("template pods carry the role label: gc would take warm pods for orphans")
	}
	o2 := &owner{name: "outpost-owner-x", uid: "u"}
	c := p.claimSpec(&Sandbox{id: "outpost-1"}, "wp", o2, map[string]string{"team": "a"})
	if c.Name != "outpost-1" || c.Spec.WarmPoolRef.Name != "wp" || c.Labels[LabelRole] != "claim" || c.Labels["team"] != "a" ||
		len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != "u" ||
		c.Spec.Lifecycle.ShutdownPolicy != extv1.ShutdownPolicyDelete || c.Spec.Lifecycle.ShutdownTime.Time.Before(time.Now().Add(23*time.Hour)) {
		t.Errorf("claim %+v", c)
	}
}
