package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/server"
)

// serveImage is the image of deploy/kubernetes (scripts/build-images.sh serve).
const serveImage = "outpost/serve:test"

// fleet is deploy/kubernetes applied in a namespace of its own.
type fleet struct {
	t      *testing.T
	c      *kubetest.Cluster
	ns     string
	token  string
	svc    string // http://<ClusterIP>:80
	client *http.Client
}

// importImage imports docker's image ref, or an image archive, into the
// cluster's containerd.
func importImage(t *testing.T, c *kubetest.Cluster, archive io.Reader) {
	t.Helper()
	imp := exec.Command("ctr", "-a", c.Env["CONTAINERD_ADDRESS"], "-n", c.Env["CONTAINERD_NAMESPACE"], "images", "import", "-")
	imp.Stdin = archive
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// loadServeImage imports outpost/serve:test and the sandbox image of the
// outpost binary inside it (the image the replicas' kubernetes provider
// runs its sandboxes from) into the cluster.
func loadServeImage(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	if exec.Command("docker", "image", "inspect", serveImage).Run() != nil {
		testenv.Missing(t, "the image "+serveImage, "scripts/build-images.sh serve")
	}
	save := exec.Command("docker", "save", serveImage)
	out, err := save.Output()
	if err != nil {
		t.Fatalf("docker save: %v", err)
	}
	importImage(t, c, bytes.NewReader(out))
	id, err := exec.Command("docker", "create", serveImage).Output()
	if err != nil {
		t.Fatalf("docker create: %v", err)
	}
	ctr := strings.TrimSpace(string(id))
	defer exec.Command("docker", "rm", ctr).Run()
	bin := filepath.Join(t.TempDir(), "outpost")
	if out, err := exec.Command("docker", "cp", ctr+":/usr/local/bin/outpost", bin).CombinedOutput(); err != nil {
		t.Fatalf("docker cp: %v\n%s", err, out)
	}
	var img bytes.Buffer
	if _, err := kubernetes.WriteOutpostImage(&img, bin, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	importImage(t, c, &img)
}

// overlay is the test's kustomization over deploy/kubernetes: its own
// namespace, sandboxes with small requests (one node of 2 CPUs).
const overlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
- %s
patches:
- target: {kind: Deployment, name: outpost-serve}
  patch: |
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --set=kubernetes.cpu_request=10m
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --set=kubernetes.memory_request=16Mi
`

// deployFleet applies deploy/kubernetes with the Secret pointing at a
// PostgreSQL on the cluster bridge and waits for its 2 ready replicas.
func deployFleet(t *testing.T) *fleet {
	c := kubetest.Require(t)
	cidr := c.Env["POD_CIDR"]
	if cidr == "" {
		t.Fatal("the running cluster predates kube-proxy (no POD_CIDR in cluster.env): restart it with scripts/kube-down.sh and scripts/kube-up.sh")
	}
	loadServeImage(t, c)
	pg := pgtest.Listening(t, c.Gateway, cidr)
	ctx := context.Background()
	f := &fleet{t: t, c: c, ns: fmt.Sprintf("outpost-fleet-%d", os.Getpid()), client: &http.Client{}}
	if _, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range f.pods(t, "app.kubernetes.io/name=outpost-serve") {
				out, _ := f.kubectl("logs", "--tail=40", p.Name)
				t.Logf("logs of %s:\n%s", p.Name, out)
			}
		}
		f.kubectl("delete", "namespace", f.ns, "--wait=true", "--timeout=120s")
	})
	tokens := filepath.Join(t.TempDir(), "serve-tokens")
	token, err := server.AddToken(tokens, "ci")
	if err != nil {
		t.Fatal(err)
	}
	f.token = token
	tb, _ := os.ReadFile(tokens)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "outpost-serve"},
		Data: map[string][]byte{"serve-tokens": tb, "store-url": []byte(pg.TCPURL("postgres"))}}
	if _, err := c.Admin.CoreV1().Secrets(f.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	deploy := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes")
	rel, err := filepath.Rel(dir, deploy)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(fmt.Sprintf(overlay, f.ns, rel)), 0o644)
	if out, err := f.kubectl("apply", "-k", dir); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	f.rolledOut()
	svc, err := c.Admin.CoreV1().Services(f.ns).Get(ctx, "outpost-serve", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = "http://" + svc.Spec.ClusterIP + ":80"
	return f
}

func (f *fleet) kubectl(args ...string) ([]byte, error) {
	cmd := exec.Command(f.c.Env["KUBECTL"], append([]string{"--kubeconfig", f.c.Env["KUBECONFIG"], "-n", f.ns}, args...)...)
	return cmd.CombinedOutput()
}

// rolledOut waits for the Deployment's rollout: 2 ready replicas of the
// newest template.
func (f *fleet) rolledOut() {
	f.t.Helper()
	if out, err := f.kubectl("rollout", "status", "deployment/outpost-serve", "--timeout=5m"); err != nil {
		f.t.Fatalf("rollout: %v\n%s", err, out)
	}
}

func (f *fleet) pods(t *testing.T, selector string) []corev1.Pod {
	t.Helper()
	l, err := f.c.Admin.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// replicas returns the ready serve pods, by name.
func (f *fleet) replicas(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range f.pods(t, "app.kubernetes.io/name=outpost-serve") {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				out[p.Name] = "http://" + p.Status.PodIP + ":7070"
			}
		}
	}
	return out
}

func (f *fleet) do(base, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, r)
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (f *fleet) start(base string, req map[string]any) (string, error) {
	code, b, err := f.do(base, "POST", "/v1/turns", req)
	if err != nil || code != 202 {
		return "", fmt.Errorf("POST /v1/turns: %d %s %v", code, b, err)
	}
	var st struct{ ID string }
	json.Unmarshal(b, &st)
	return st.ID, nil
}

type item struct {
	seq  int64
	typ  string
	data map[string]any
}

// follow reads a turn's events after `after` from base until the stream
// ends or stop says so.
func (f *fleet) follow(base, id string, after int64, stop func(item) bool) ([]item, error) {
	req, _ := http.NewRequest("GET", base+"/v1/turns/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("events: %d %s", resp.StatusCode, b)
	}
	var out []item
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	var cur item
	var raw string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.seq, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "data: "):
			raw = line[6:]
		case line == "" && raw != "":
			if err := json.Unmarshal([]byte(raw), &cur.data); err != nil {
				return out, err
			}
			cur.typ, _ = cur.data["type"].(string)
			out = append(out, cur)
			if stop != nil && stop(cur) {
				return out, nil
			}
			cur, raw = item{}, ""
		}
	}
	return out, sc.Err()
}

// result follows a turn to its result line, reconnecting with
// Last-Event-ID when a stream breaks (a replica going away), as a client
// that keeps following does; a doubled or missing result is an error
// (and nil is returned). Safe in any goroutine.
func (f *fleet) result(t *testing.T, base, id string) map[string]any {
	t.Helper()
	var last int64
	var res []map[string]any
	for try := 0; try < 60; try++ {
		items, err := f.follow(base, id, last, nil)
		for _, it := range items {
			if it.seq <= last && it.seq != 0 {
				t.Errorf("turn %s: event %d again after %d", id, it.seq, last)
			}
			if it.seq > last {
				last = it.seq
			}
			if it.typ == "result" {
				res = append(res, it.data)
			}
		}
		if len(res) > 0 {
			break
		}
		if err == nil && len(items) == 0 {
			err = fmt.Errorf("an empty stream")
		}
		time.Sleep(500 * time.Millisecond) // a reconnect's back-off, not a synchronisation
	}
	if len(res) != 1 {
		t.Errorf("turn %s: %d result lines", id, len(res))
		return nil
	}
	return res[0]
}

func errorOf(res map[string]any) (string, map[string]any) {
	e, _ := res["error"].(map[string]any)
	if e == nil {
		return "", nil
	}
	d, _ := e["details"].(map[string]any)
	return fmt.Sprint(e["code"]), d
}

// TestFleetOnCluster applies deploy/kubernetes to the test cluster, with
// outpost/serve:test, its Secret pointing at a real PostgreSQL on the
// cluster bridge and the kubernetes provider on the in-cluster
// configuration, and drives its 2 replicas through their Service and
// their pods.
func TestFleetOnCluster(t *testing.T) {
	f := deployFleet(t)
	t.Run("40 turns through the Service", f.turnsThroughService)
	t.Run("a turn of A followed, steered and cancelled through B", f.acrossReplicas)
	t.Run("A force-deleted during 5 running turns", f.replicaLost)
	t.Run("a rolling restart during a stream of turns", f.rollingRestart)
}

func (f *fleet) turnsThroughService(t *testing.T) {
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := f.start(f.svc, map[string]any{"prompt": fmt.Sprintf("turn %d #tool", i)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = id
			res := f.result(t, f.svc, id)
			if code, _ := errorOf(res); code != "" || !strings.Contains(fmt.Sprint(res["text"]), fmt.Sprintf("turn %d", i)) {
				t.Errorf("turn %d (%s): %v", i, id, res)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Errorf("turn id %q missing or doubled", id)
		}
		seen[id] = true
	}
}

// two returns two ready replicas, A and B: name and address.
func (f *fleet) two(t *testing.T) (an, a, bn, b string) {
	t.Helper()
	r := f.replicas(t)
	if len(r) != 2 {
		t.Fatalf("ready replicas: %v, want 2", r)
	}
	for n, u := range r {
		if a == "" {
			an, a = n, u
		} else {
			bn, b = n, u
		}
	}
	return
}

func (f *fleet) acrossReplicas(t *testing.T) {
	_, a, _, b := f.two(t)
	first := func(it item) bool { return it.typ == "message" }
	id, err := f.start(a, map[string]any{"prompt": "#slow=3000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.follow(b, id, 0, first); err != nil {
		t.Fatal(err)
	}
	if code, body, err := f.do(b, "POST", "/v1/turns/"+id+"/messages", map[string]any{"text": "wrap up"}); code != 202 {
		t.Fatalf("steer through B: %d %s %v", code, body, err)
	}
	if res := f.result(t, b, id); !strings.Contains(fmt.Sprint(res["text"]), "steered: wrap up") {
		t.Errorf("the turn steered through B answered %v", res["text"])
	}
	id, err = f.start(a, map[string]any{"prompt": "#slow=60000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.follow(b, id, 0, first); err != nil {
		t.Fatal(err)
	}
	if code, body, err := f.do(b, "POST", "/v1/turns/"+id+"/cancel", nil); code != 202 {
		t.Fatalf("cancel through B: %d %s %v", code, body, err)
	}
	if code, d := errorOf(f.result(t, b, id)); code != "cancelled" || d["cancelled_by"] != "client" {
		t.Errorf("the turn cancelled through B ended with %s %v", code, d)
	}
}

// sandboxPods returns the names of the running sandbox pods.
func (f *fleet) sandboxPods(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range f.pods(t, kubernetes.LabelRole+"=sandbox") {
		out[p.Name] = true
	}
	return out
}

// replicaLost force-deletes replica A's pod (the process is killed, its
// heartbeat stops) while 5 turns run on it: through B each ends with code
// sandbox and details.replica_lost naming A.
func (f *fleet) replicaLost(t *testing.T) {
	an, a, _, b := f.two(t)
	before := f.sandboxPods(t)
	var ids []string
	for i := range 5 {
		id, err := f.start(a, map[string]any{"prompt": fmt.Sprintf("hang %d #hang", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids { // each runs: B has seen an event of it
		if _, err := f.follow(b, id, 0, func(item) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	var theirs []string
	for p := range f.sandboxPods(t) {
		if !before[p] {
			theirs = append(theirs, p)
		}
	}
	if len(theirs) != 5 {
		t.Errorf("sandbox pods of the 5 running turns: %v", theirs)
	}
	killed := time.Now()
	if out, err := f.kubectl("delete", "pod", an, "--grace-period=0", "--force"); err != nil {
		t.Fatalf("kubectl delete pod: %v\n%s", err, out)
	}
	for _, id := range ids {
		res := f.result(t, b, id)
		if code, d := errorOf(res); code != "sandbox" || d["replica_lost"] != an {
			t.Errorf("turn %s after %s was deleted: %v", id, an, res["error"])
		}
	}
	t.Logf("the 5 turns of the deleted replica ended, as seen through B, %v after the delete (heartbeat 5s)", time.Since(killed).Round(time.Millisecond))
	// Their sandbox pods are not checked: the provider deletes a lost
	// replica's pods when another replica opens a sandbox after the owner
	// Lease expired (sweep on Open), and nothing here opens one.
	f.rolledOut()
}

// rollingRestart restarts the Deployment (kubectl rollout restart) while
// turns start through the Service one after another: every turn that
// started, followed through the Service with reconnects, ends with its
// own answer once.
func (f *fleet) rollingRestart(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	started, refused := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond): // the stream's pace
			}
			prompt := fmt.Sprintf("rolling %d #slow=2000", i)
			id, err := f.start(f.svc, map[string]any{"prompt": prompt})
			if err != nil { // a draining replica's 503, or a connection cut: never started
				mu.Lock()
				refused++
				mu.Unlock()
				continue
			}
			mu.Lock()
			started++
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := f.result(t, f.svc, id)
				if code, _ := errorOf(res); code != "" || !strings.Contains(fmt.Sprint(res["text"]), fmt.Sprintf("rolling %d", i)) {
					t.Errorf("turn %d (%s) across the restart: %v", i, id, res)
				}
			}()
		}
	}()
	if out, err := f.kubectl("rollout", "restart", "deployment/outpost-serve"); err != nil {
		t.Fatalf("rollout restart: %v\n%s", err, out)
	}
	f.rolledOut()
	close(stop)
	wg.Wait()
	t.Logf("%d turns started during the rolling restart, each followed to its answer; %d starts refused", started, refused)
	if started == 0 {
		t.Error("no turn started during the rolling restart")
	}
}
