// Package kubetest gives tests a real Kubernetes cluster for the
// kubernetes provider: the first Require finds the cluster of
// scripts/kube-up.sh (or, as root, starts it; Main stops it after the
// tests), makes a namespace of the test process, binds the provider's
// minimal Role (rbac.yaml) in it to the cluster's rights-less test user,
// and imports the test's outpost image into the node's containerd. Provider returns a provider that uses
// exactly those rights.
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/kubernetes"
)

// Cluster is the test cluster, once Require found it.
type Cluster struct {
	Env        map[string]string // cluster.env of scripts/kube-up.sh
	Admin      k8s.Interface     // cluster-admin client
	Kubeconfig string            // the test user's kubeconfig (rights from the Role only)
	Namespace  string            // this test process's namespace, with the Role bound
	Binary     string            // the in-sandbox binary (outpost-sandbox) of the tests, static
	Image      string            // its outpost image, imported
	Gateway    string            // the pods' gateway to the host (the CNI bridge's address)
}

var (
	cluster *Cluster
	why     string // why there is none
	root    = repoRoot()
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "../../.."))
}

// Dir is the state directory of scripts/kube-up.sh.
func Dir() string {
	if d := os.Getenv("OUTPOST_KUBE_DIR"); d != "" {
		return d
	}
	return "/tmp/outpost-kube"
}

func readEnv() (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(Dir(), "cluster.env"))
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

func ready(env map[string]string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, env["KUBECTL"], "--kubeconfig", env["KUBECONFIG"], "get", "--raw=/readyz").Run() == nil
}

// agentSandboxReady reports whether the cluster's agent-sandbox controller
// answers (AGENT_SANDBOX_READYZ of cluster.env; a cluster started by a
// kube-up.sh before agent-sandbox was added has none).
func agentSandboxReady(env map[string]string) bool {
	u := env["AGENT_SANDBOX_READYZ"]
	if u == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// kubeUp runs scripts/kube-up.sh (idempotent: a cluster already up is
// completed, not restarted).
func kubeUp() error {
	cmd := exec.Command(filepath.Join(root, "scripts/kube-up.sh"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// Main runs the tests and exits. The cluster is not looked for here:
// the first Require (or Get) finds it or, as root, starts it, so that a
// run of tests that need none (go test -run '^Example') costs no cluster.
// After the tests, Main removes the test namespace and stops a cluster
// that Require started (unless OUTPOST_KUBE_KEEP=1).
func Main(m *testing.M) {
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var (
	once    sync.Once
	started bool   // Require started the cluster (scripts/kube-up.sh)
	cleanup func() // removes the test namespace
)

// start finds the cluster of scripts/kube-up.sh or, as root, starts it,
// then sets up this process's namespace; on failure it sets why. Once.
func start() {
	env, err := readEnv()
	up := err == nil && ready(env)
	if !up || !agentSandboxReady(env) {
		switch {
		case os.Getuid() != 0 && !up:
			why = "no cluster answers and starting one needs root"
			return
		case os.Getuid() != 0:
			why = "the cluster has no agent-sandbox controller: run scripts/kube-up.sh (as root; it completes a running cluster)"
			return
		case up:
			fmt.Fprintln(os.Stderr, "kubetest: installing agent-sandbox in the running cluster with scripts/kube-up.sh")
		default:
			fmt.Fprintln(os.Stderr, "kubetest: starting the cluster with scripts/kube-up.sh")
			started = true // stopped by Main even when it came up only partly
		}
		if err := kubeUp(); err != nil {
			why = "scripts/kube-up.sh failed: " + err.Error()
			return
		}
		if env, err = readEnv(); err != nil {
			why = err.Error()
			return
		}
	}
	if cleanup, err = setup(env); err != nil {
		why = "setting up the test namespace: " + err.Error()
	}
}

// stop removes the namespace and stops the cluster if this process
// started it.
func stop() error {
	if cleanup != nil {
		cleanup()
	}
	if !started || os.Getenv("OUTPOST_KUBE_KEEP") == "1" {
		return nil
	}
	cmd := exec.Command(filepath.Join(root, "scripts/kube-down.sh"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/kube-down.sh: %w", err)
	}
	return nil
}

func setup(env map[string]string) (func(), error) {
	// Before the admin client: the providers of the tests, made beside it,
	// would set klog's logger while it reads it (a race).
	kubernetes.QuietClientLogs()
	cfg, err := clientcmd.BuildConfigFromFlags("", env["KUBECONFIG"])
	if err != nil {
		return nil, err
	}
	admin, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := testenv.Build(testenv.SandboxPackage)
	if err != nil {
		return nil, err
	}
	var img bytes.Buffer
	ref, err := kubernetes.WriteOutpostImage(&img, bin, runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	imp := exec.CommandContext(ctx, "ctr", "-a", env["CONTAINERD_ADDRESS"], "-n", env["CONTAINERD_NAMESPACE"], "images", "import", "-")
	imp.Stdin = &img
	if out, err := imp.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ctr images import: %v\n%s", err, out)
	}
	ns := fmt.Sprintf("outpost-test-%d", os.Getpid())
	if err := makeNamespace(ctx, admin, env, ns); err != nil {
		return nil, err
	}
	cluster = &Cluster{Env: env, Admin: admin, Kubeconfig: env["OUTPOST_KUBECONFIG"], Namespace: ns, Binary: bin, Image: ref, Gateway: env["GATEWAY"]}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		testenv.RemoveBuilds()
	}, nil
}

// makeNamespace creates the test namespace ns with the provider's minimal
// Role (rbac.yaml) bound to the cluster's rights-less test user.
func makeNamespace(ctx context.Context, admin k8s.Interface, env map[string]string, ns string) error {
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{kubernetes.LabelManaged: "outpost-tests"}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(kubernetes.RoleYAML, nil, nil)
	if err != nil {
		return err
	}
	role := obj.(*rbacv1.Role)
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "outpost"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: env["OUTPOST_KUBE_USER"]}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	if _, err = admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return err
	}
	return bound(ctx, admin, env["OUTPOST_KUBE_USER"], ns)
}

// bound waits until the API server's authorizer lets user create Leases
// in ns: a binding just created takes a moment to reach its cache, and a
// test's first lease in its new namespace was once refused ("cannot
// create resource leases", two tests of one fresh-clone run).
func bound(ctx context.Context, admin k8s.Interface, user, ns string) error {
	sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: user,
		ResourceAttributes: &authv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}}}
	for {
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && r.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Role bound to %s in %s is not in force: %w (last review: %v)", user, ns, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var namespaces atomic.Int64 // the test namespaces Parallel made

// Parallel is Require for a test that runs beside the others
// (t.Parallel): the cluster it returns has a namespace of the test's own,
// with the Role bound as in the process's, removed when the test ends. So
// what the test counts or changes there (pods left, network policies)
// is its own. The cluster's tests mostly wait on pods, and ran one at a
// time before: 17 of them took 13 min of a suite's wall time.
func Parallel(t *testing.T) *Cluster {
	t.Helper()
	t.Parallel()
	c := Require(t)
	own := *c
	own.Namespace = fmt.Sprintf("%s-%d", c.Namespace, namespaces.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := makeNamespace(ctx, c.Admin, c.Env, own.Namespace); err != nil {
		t.Fatalf("kubetest: the test's namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Admin.CoreV1().Namespaces().Delete(ctx, own.Namespace, metav1.DeleteOptions{}); err != nil {
			t.Logf("kubetest: removing the namespace %s: %v", own.Namespace, err)
		}
	})
	return &own
}

// Require returns the cluster, or fails (CI) / skips the test loudly.
// The first call finds or starts it (see Main), which can take a while;
// concurrent calls wait for that one.
func Require(t testing.TB) *Cluster {
	t.Helper()
	once.Do(func() {
		start()
		if why != "" {
			fmt.Fprintf(os.Stderr, "kubetest: no cluster: %s\n", why)
		}
	})
	if cluster == nil {
		testenv.Missing(t, "a Kubernetes cluster ("+why+")", "scripts/kube-up.sh (as root)")
	}
	return cluster
}

// Busybox is the test image with a shell (scripts/build-images.sh,
// imported by scripts/kube-up.sh).
const Busybox = "outpost/busybox:test"

// Debian is the test image with a C library (for real agent CLIs).
const Debian = "outpost/debian:test"

// Options are the provider options of the test cluster: the test user's
// kubeconfig, the test namespace, the test binary, images never pulled,
// small requests.
func (c *Cluster) Options() kubernetes.Options {
	return kubernetes.Options{
		Kubeconfig:    c.Kubeconfig,
		Namespace:     c.Namespace,
		Binary:        c.Binary,
		Pull:          kubernetes.PullNever,
		CPURequest:    "10m",
		MemoryRequest: "16Mi",
		// Three minutes: the suite runs this package beside three others
		// on two cores, where pods took over a minute to start (load 46
		// in a fresh-clone run: TestClaudeInPod, TestEchoTurns). Tests of
		// the bound itself set their own.
		StartTimeout: 3 * time.Minute,
	}
}

// Provider returns a provider on the test cluster, closed when the test
// ends; mutate adjusts its options.
func (c *Cluster) Provider(t testing.TB, mutate ...func(*kubernetes.Options)) *kubernetes.Provider {
	t.Helper()
	o := c.Options()
	for _, m := range mutate {
		m(&o)
	}
	p, err := kubernetes.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Pods lists the pods of the test namespace with a label selector.
func (c *Cluster) Pods(t testing.TB, selector string) []corev1.Pod {
	t.Helper()
	l, err := c.Admin.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// Kubectl runs kubectl as the cluster admin in the cluster's namespace,
// stdin given, and returns its output or fails the test.
func (c *Cluster) Kubectl(t testing.TB, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.Env["KUBECTL"], append([]string{"--kubeconfig", c.Env["KUBECONFIG"], "-n", c.Namespace}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// LabelTemplate is the label of AgentSandbox's pods: their template's
// name.
const LabelTemplate = "outpost-test/template"

// AgentSandbox makes, as the cluster admin, a SandboxTemplate named name
// of the provider's pods (Provider.SandboxTemplate of the busybox image)
// (its pods labelled LabelTemplate) and a SandboxWarmPool of it with replicas pods, waits until they are
// ready, and returns the options of via=agent-sandbox claiming from it
// (for Provider: the test user's rights, the Role's only). mutate
// adjusts the options of the provider that makes the template (after the
// busybox image is set).
func (c *Cluster) AgentSandbox(t testing.TB, name string, replicas int32, mutate ...func(*kubernetes.Options)) func(*kubernetes.Options) {
	t.Helper()
	busybox := func(o *kubernetes.Options) { o.Image = Busybox }
	tmpl, err := c.Provider(t, append([]func(*kubernetes.Options){busybox}, mutate...)...).SandboxTemplate(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.PodTemplate.ObjectMeta.Labels[LabelTemplate] = name
	pool := &extv1.SandboxWarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: extv1.SandboxWarmPoolKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       extv1.SandboxWarmPoolSpec{Replicas: &replicas, TemplateRef: extv1.SandboxTemplateRef{Name: name}},
	}
	for _, obj := range []any{tmpl, pool} {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		c.Kubectl(t, b, "apply", "-f", "-")
	}
	if replicas > 0 {
		c.Kubectl(t, nil, "wait", "--for=jsonpath={.status.readyReplicas}="+strconv.Itoa(int(replicas)), "sandboxwarmpool/"+name, "--timeout=120s")
	}
	return func(o *kubernetes.Options) { o.Via, o.Template = kubernetes.ViaAgentSandbox, name }
}
