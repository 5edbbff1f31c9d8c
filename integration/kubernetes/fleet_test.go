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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

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
// namespace, sandboxes with small requests (one node of 2 CPUs), owner
// Leases of leaseDuration.
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
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --set=kubernetes.lease_duration=15s
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
	f := &fleet{c: c, ns: fmt.Sprintf("outpost-fleet-%d", os.Getpid()), client: &http.Client{}}
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
	f.rolledOut(t)
	svc, err := c.Admin.CoreV1().Services(f.ns).Get(ctx, "outpost-serve", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = "http://" + svc.Spec.ClusterIP + ":80"
	f.serviceAnswers(t)
	return f
}

// serviceAnswers waits until the Service routes (its ready endpoints
// reach kube-proxy's rules a moment after the rollout: until then the
// ClusterIP refuses connections).
func (f *fleet) serviceAnswers(t *testing.T) {
	t.Helper()
	var last error
	for range 120 {
		code, _, err := f.do(f.svc, "GET", "/healthz", nil)
		if err == nil && code == 200 {
			return
		}
		last = fmt.Errorf("%d %v", code, err)
		// A kept-alive connection keeps the backend kube-proxy's rules
		// gave it (a pod of a Service deleted before, whose address the
		// ClusterIP had): each try on a new one.
		f.client.CloseIdleConnections()
		time.Sleep(500 * time.Millisecond) // kube-proxy's sync is not an event the test can wait on
	}
	t.Fatalf("the Service %s does not answer /healthz: %v", f.svc, last)
}

func (f *fleet) kubectl(args ...string) ([]byte, error) {
	cmd := exec.Command(f.c.Env["KUBECTL"], append([]string{"--kubeconfig", f.c.Env["KUBECONFIG"], "-n", f.ns}, args...)...)
	return cmd.CombinedOutput()
}

// rolledOut waits for the Deployment's rollout: 2 ready replicas of the
// newest template.
func (f *fleet) rolledOut(t *testing.T) {
	t.Helper()
	if out, err := f.kubectl("rollout", "status", "deployment/outpost-serve", "--timeout=5m"); err != nil {
		pods, _ := f.kubectl("get", "pods", "-o", "wide")
		t.Logf("pods:\n%s", pods)
		for _, p := range f.pods(t, "app.kubernetes.io/name=outpost-serve") {
			logs, _ := f.kubectl("logs", "--tail=60", p.Name)
			t.Logf("logs of %s:\n%s", p.Name, logs)
		}
		t.Fatalf("rollout: %v\n%s", err, out)
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
	t.Parallel() // in a namespace of its own (deployFleet)
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

// leaseDuration is the replicas' owner Lease duration in the overlay: a
// lost replica's sandbox pods are deleted within SweepBound of its death.
const leaseDuration = 15 * time.Second

// sweepBound is kubernetes.Provider.SweepBound for leaseDuration: the
// Lease's duration, the 5 s margin, a third of the duration.
var sweepBound = leaseDuration + 5*time.Second + leaseDuration/3

// waitGone waits until none of the named pods is left (deadline bounds
// the wait) and returns the ones still there.
func (f *fleet) waitGone(t *testing.T, names []string, deadline time.Time) []string {
	t.Helper()
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	for {
		l, err := f.c.Admin.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelRole + "=sandbox"})
		if err != nil {
			return names
		}
		var left []string
		for _, p := range l.Items {
			if slices.Contains(names, p.Name) {
				left = append(left, p.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		w, err := f.c.Admin.CoreV1().Pods(f.ns).Watch(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelRole + "=sandbox", ResourceVersion: l.ResourceVersion})
		if err != nil {
			return left
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				break
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return left
		}
	}
}

// replicaLost force-deletes replica A's pod (the process is killed, its
// heartbeat and its owner Lease's renewals stop) while 5 turns run on it,
// one continuing a stored conversation: through B each ends with code
// sandbox and details.replica_lost naming A; B's provider deletes the
// sandbox pods of the 5 turns by its periodic sweep (no turn opens a
// sandbox meanwhile)
// and its warm pool's within the sweep's bound; the conversation resumes
// on B.
func (f *fleet) replicaLost(t *testing.T) {
	an, a, _, b := f.two(t)
	first, err := f.start(a, map[string]any{"prompt": "remember this"})
	if err != nil {
		t.Fatal(err)
	}
	conv := fmt.Sprint(f.result(t, a, first)["conversation"])
	var ids []string
	for i := range 5 {
		req := map[string]any{"prompt": fmt.Sprintf("hang %d #hang", i)}
		if i == 0 {
			req["resume"] = conv
		}
		id, err := f.start(a, req)
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
	// A's pods: those of the 5 turns and of its warm pool.
	var theirs []string
	for _, p := range f.pods(t, kubernetes.LabelRole+"=sandbox") {
		if p.Annotations[kubernetes.AnnotationHost] == an {
			theirs = append(theirs, p.Name)
		}
	}
	if len(theirs) < 5 {
		t.Errorf("sandbox pods of replica %s with 5 running turns: %v", an, theirs)
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
	t.Logf("the 5 turns of the deleted replica ended, as seen through B, %v after the delete (heartbeat 5s: bound 20s and a poll)", time.Since(killed).Round(time.Millisecond))
	// The pods' deletion by their node (grace 0) is given 30 s past the bound.
	if left := f.waitGone(t, theirs, killed.Add(sweepBound+30*time.Second)); len(left) > 0 {
		t.Errorf("sandbox pods of the lost replica still there %v after the delete (sweep bound %v): %v", time.Since(killed).Round(time.Second), sweepBound, left)
	} else {
		t.Logf("0 of the lost replica's %d sandbox pods (its 5 turns', its warm pool's) left %v after the delete (sweep bound %v, lease duration %v)", len(theirs), time.Since(killed).Round(time.Millisecond), sweepBound, leaseDuration)
	}
	f.resumes(t, b, conv)
	f.rolledOut(t)
}

// resumes checks that conversation conv, whose turn was lost with its
// replica, is at its 1 stored turn and resumes on replica b (retried
// while the dead replica's hold on it lasts: PostgreSQL ends its session
// by TCP keepalives).
func (f *fleet) resumes(t *testing.T, b, conv string) {
	t.Helper()
	code, body, err := f.do(b, "GET", "/v1/conversations/"+conv, nil)
	var m struct{ Turns int }
	json.Unmarshal(body, &m)
	if err != nil || code != 200 || m.Turns != 1 {
		t.Errorf("the conversation after the loss: %d %s %v, want its 1 stored turn", code, body, err)
	}
	var res map[string]any
	for range 60 {
		id, err := f.start(b, map[string]any{"prompt": "and now?", "resume": conv})
		if err != nil {
			t.Fatal(err)
		}
		if res = f.result(t, b, id); res["error"] == nil {
			break
		}
		time.Sleep(time.Second) // the hold's session ends by keepalives, not an event to wait on
	}
	if res["error"] != nil || fmt.Sprint(res["conversation"]) != conv {
		t.Errorf("resuming on B: %v", res)
	}
}

// rollingRestart restarts the Deployment (kubectl rollout restart) while
// 3 clients each start a turn of 2 s (#slow=40: 40 deltas 50 ms apart)
// through the Service, follow it to its result through the Service
// (reconnecting when a stream breaks) and start the next: every turn
// that started ends with its own answer once. A start refused by a
// draining replica (503) or cut off is retried. A turn of over a minute
// (#slow=1300, 65 s), started before the restart and so on a replica
// that drains, is answered too: its agent's live stdin, idle all along,
// ends after more than a minute (issue #26: over client-go's WebSocket
// exec it never did, and the turn failed with code sandbox 61 s later).
func (f *fleet) rollingRestart(t *testing.T) {
	const longPrompt = "outlives the restart #slow=1300"
	id, err := f.start(f.svc, map[string]any{"prompt": longPrompt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.follow(f.svc, id, 0, func(it item) bool { return it.typ == "message" }); err != nil {
		t.Fatal(err)
	}
	var long map[string]any
	longDone := make(chan struct{})
	go func() { defer close(longDone); long = f.result(t, f.svc, id) }()
	defer func() { <-longDone }() // f.result reports to t
	const clients = 3
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var started, refused atomic.Int64
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				prompt := fmt.Sprintf("rolling %d.%d #slow=40", c, i)
				id, err := f.start(f.svc, map[string]any{"prompt": prompt})
				if err != nil { // a draining replica's 503, or a connection cut: never started
					refused.Add(1)
					time.Sleep(500 * time.Millisecond) // a client's back-off, not a synchronisation
					continue
				}
				started.Add(1)
				res := f.result(t, f.svc, id)
				if code, _ := errorOf(res); code != "" || !strings.Contains(fmt.Sprint(res["text"]), prompt) {
					t.Errorf("turn %q (%s) across the restart: %v", prompt, id, res)
				}
			}
		}()
	}
	began := time.Now()
	if out, err := f.kubectl("rollout", "restart", "deployment/outpost-serve"); err != nil {
		t.Fatalf("rollout restart: %v\n%s", err, out)
	}
	f.rolledOut(t)
	took := time.Since(began)
	close(stop)
	wg.Wait()
	t.Logf("%d turns started by %d clients during the rolling restart (%v), each followed to its answer; %d starts refused or cut off", started.Load(), clients, took.Round(time.Second), refused.Load())
	if started.Load() == 0 {
		t.Error("no turn started during the rolling restart")
	}
	<-longDone
	if code, _ := errorOf(long); code != "" || !strings.Contains(fmt.Sprint(long["text"]), longPrompt) {
		t.Errorf("the turn of 65 s started before the restart (%s): %v", id, long)
	} else {
		t.Logf("the turn of 65 s started before the restart, on a replica that drained, answered %v after the restart began", time.Since(began).Round(time.Second))
	}
}
