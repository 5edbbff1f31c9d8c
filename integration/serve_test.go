package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
)

// Canary secrets: in the server's environment and its .outpost/.env.
const (
	serveCanary       = "canary-serve-4d1f8e"
	serveCanaryDotEnv = "canary-serve-dotenv-93ab"
)

// served is an `outpost serve` process of the built binary on a Unix
// socket.
type served struct {
	t      *testing.T
	cmd    *exec.Cmd
	sock   string
	home   string
	work   string
	logs   *lockedBuffer
	client *http.Client
	exited chan struct{}
}

// startServe starts the server with args; home and work are reused when
// given (a restart).
func startServe(t *testing.T, home, work string, args ...string) *served {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	if work == "" {
		work = t.TempDir()
		os.MkdirAll(filepath.Join(work, ".outpost"), 0o700)
		os.WriteFile(filepath.Join(work, ".outpost", ".env"), []byte("SERVICE_TOKEN="+serveCanaryDotEnv+"\n"), 0o600)
	}
	run := filepath.Join(home, "run")
	os.MkdirAll(run, 0o700)
	s := &served{t: t, sock: filepath.Join(run, "serve.sock"), home: home, work: work, logs: &lockedBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(outpostBinary(t), append([]string{"serve", "--socket", s.sock, "--workdir", work}, args...)...)
	s.cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home, "ECHO_API_KEY="+serveCanary)
	stdout, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		<-s.exited
		if strings.Contains(s.logs.String(), serveCanary) || strings.Contains(s.logs.String(), serveCanaryDotEnv) {
			t.Error("a canary secret is in the server's logs")
		}
		if t.Failed() {
			t.Logf("server logs:\n%s", s.logs.String())
		}
	})
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.Contains(sc.Text(), "listening on unix:") {
		<-s.exited
		t.Fatalf("outpost serve did not start: %q\n%s", sc.Text(), s.logs.String())
	}
	go io.Copy(io.Discard, stdout)
	s.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.sock)
		},
	}}
	return s
}

func (s *served) do(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://outpost"+path, r)
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if bytes.Contains(b, []byte(serveCanary)) || bytes.Contains(b, []byte(serveCanaryDotEnv)) {
		s.t.Errorf("a canary secret is in the response to %s %s", method, path)
	}
	return resp.StatusCode, b
}

func (s *served) start(req map[string]any) (string, error) {
	code, b := s.do("POST", "/v1/turns", req)
	if code != 202 {
		return "", fmt.Errorf("POST /v1/turns: %d %s", code, b)
	}
	var st struct{ ID string }
	json.Unmarshal(b, &st)
	return st.ID, nil
}

type streamed struct {
	seq  int64
	typ  string
	raw  string
	data map[string]any
}

// follow reads a turn's stream after `after`; onItem may stop it early.
func (s *served) follow(id string, after int64, onItem func(streamed) bool) ([]streamed, error) {
	req, _ := http.NewRequest("GET", "http://outpost/v1/turns/"+id+"/events", nil)
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("events: %d %s", resp.StatusCode, b)
	}
	var out []streamed
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	var cur streamed
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.seq, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "data: "):
			cur.raw = line[6:]
		case line == "" && cur.raw != "":
			if strings.Contains(cur.raw, serveCanary) || strings.Contains(cur.raw, serveCanaryDotEnv) {
				return out, fmt.Errorf("a canary secret is in an event: %s", cur.raw)
			}
			if err := json.Unmarshal([]byte(cur.raw), &cur.data); err != nil {
				return out, err
			}
			cur.typ, _ = cur.data["type"].(string)
			out = append(out, cur)
			if onItem != nil && onItem(cur) {
				return out, nil
			}
			cur = streamed{}
		}
	}
	return out, sc.Err()
}

func (s *served) metric(name string) float64 {
	s.t.Helper()
	_, b := s.do("GET", "/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		s.t.Fatalf("metric %s not found", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestServeLoad: 200 echo turns through the API at a concurrency of 20:
// no failure, no lost or repeated event, and the server's goroutines and
// memory come back after the load. Latencies (POST to result) are logged
// for docs/benchmarks.md.
func TestServeLoad(t *testing.T) {
	s := startServe(t, "", "", "--max-concurrent", "20", "--pool-size", "4")
	// Warm up, then take the baseline.
	for range 3 {
		id, err := s.start(map[string]any{"prompt": "warm up"})
		if err != nil {
			t.Fatal(err)
		}
		s.follow(id, 0, nil)
	}
	goroutines := s.metric("go_goroutines")
	const turns, concurrency = 200, 20
	lat := make([]time.Duration, turns)
	errs := make(chan error, turns)
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i := range turns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			begin := time.Now()
			prompt := fmt.Sprintf("load %d #tool", i)
			if i%10 == 0 {
				prompt += " #leak ECHO_API_KEY #leak SERVICE_TOKEN"
			}
			id, err := s.start(map[string]any{"prompt": prompt})
			if err != nil {
				errs <- err
				return
			}
			items, err := s.follow(id, 0, nil)
			lat[i] = time.Since(begin)
			if err != nil {
				errs <- fmt.Errorf("turn %d: %v", i, err)
				return
			}
			types := []string{}
			for j, it := range items {
				if it.seq != int64(j+1) {
					errs <- fmt.Errorf("turn %d: event %d has sequence number %d", i, j+1, it.seq)
					return
				}
				if it.typ != "notice" { // the secrets notice: ECHO_API_KEY enters the sandbox
					types = append(types, it.typ)
				}
			}
			want := []string{"session", "tool_call", "tool_result", "message", "finished", "result"}
			if !slices.Equal(types, want) {
				errs <- fmt.Errorf("turn %d: events %v, want %v", i, types, want)
				return
			}
			if res := items[len(items)-1].data; res["error"] != nil {
				errs <- fmt.Errorf("turn %d failed: %s", i, items[len(items)-1].raw)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ok := s.metric(`outpost_turns_total{agent="echo",code="ok",sandbox="local"}`); ok != turns+3 {
		t.Errorf("outpost_turns_total ok = %v, want %d", ok, turns+3)
	}
	slices.Sort(lat)
	t.Logf("%d echo turns at concurrency %d on local: p50 %v, p99 %v, max %v", turns, concurrency, lat[turns/2], lat[turns*99/100], lat[turns-1])
	// Bounded after the load: idle keep-alive connections of this client
	// are closed first, then goroutines must be back near the baseline
	// (finished turns keep only their retained events).
	s.client.CloseIdleConnections()
	after := 0.0
	for range 200 {
		if after = s.metric("go_goroutines"); after <= goroutines+10 {
			break
		}
		time.Sleep(10 * time.Millisecond) // waiting for connections to close, not timing
		s.client.CloseIdleConnections()
	}
	if after > goroutines+10 {
		t.Errorf("goroutines after the load: %v, before: %v", after, goroutines)
	}
	if rss := s.metric("process_resident_memory_bytes"); rss > 512<<20 {
		t.Errorf("server resident memory after the load: %.0f MiB", rss/(1<<20))
	}
	// A pooled sandbox counts as leased until its release, in the
	// background after the turn's result, is done.
	leased := func() float64 { return s.metric(`outpost_pool_sandboxes{sandbox="local",state="leased"}`) }
	pool := leased()
	for i := 0; pool != 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond) // waiting for the releases, not timing
		pool = leased()
	}
	if pool != 0 {
		t.Errorf("pooled sandboxes still leased 10 s after the load: %v", pool)
	}
}

// TestServeSIGTERM: SIGTERM during 10 running turns: new turns refused,
// the running ones cancelled after the grace with their conversations
// captured, every stream ends with its result, the server exits 0.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel()
	s := startServe(t, "", "", "--max-concurrent", "10", "--grace", "200ms")
	type res struct {
		items []streamed
		err   error
	}
	results := make(chan res, 10)
	for range 10 {
		id, err := s.start(map[string]any{"prompt": "#slow=100000"})
		if err != nil {
			t.Fatal(err)
		}
		running := make(chan struct{})
		go func() {
			first := true
			items, err := s.follow(id, 0, func(it streamed) bool {
				// The agent runs once its session is announced (the
				// secrets notice comes before it starts).
				if first && it.typ == "session" {
					first = false
					close(running)
				}
				return false
			})
			if first {
				close(running)
			}
			results <- res{items, err}
		}()
		<-running
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	for range 10 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		last := r.items[len(r.items)-1]
		e, _ := last.data["error"].(map[string]any)
		if last.typ != "result" || e["code"] != "cancelled" || e["details"].(map[string]any)["cancelled_by"] != "shutdown" {
			t.Errorf("result %s", last.raw)
			continue
		}
		conv, _ := last.data["conversation"].(string)
		if _, err := os.Stat(filepath.Join(s.home, "conversations", conv+".conv")); conv == "" || err != nil {
			t.Errorf("conversation %q of a cancelled turn not captured: %v", conv, err)
		}
	}
	<-s.exited
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
}

// TestServeSIGKILL: a server SIGKILLed mid-turn on docker leaves
// containers that the restarted server removes; the conversation the
// killed turn continued is as it was before that turn, and continues.
// Not parallel: another test's docker lease would sweep the dead server's
// containers before the test has seen them.
func TestServeSIGKILL(t *testing.T) {
	dockertest.Require(t, dockertest.Busybox)
	args := []string{"--sandbox", "docker", "--image", dockertest.Busybox, "--pool-size", "1"}
	s := startServe(t, "", "", args...)
	id, err := s.start(map[string]any{"prompt": "first"})
	if err != nil {
		t.Fatal(err)
	}
	items, err := s.follow(id, 0, nil)
	if err != nil || items[len(items)-1].data["error"] != nil {
		t.Fatalf("first turn: %v %v", err, items)
	}
	conv := items[len(items)-1].data["conversation"].(string)
	id, err = s.start(map[string]any{"prompt": "#slow=100000", "resume": conv})
	if err != nil {
		t.Fatal(err)
	}
	s.follow(id, 0, func(it streamed) bool { return it.typ == "message" })
	pid := s.cmd.Process.Pid
	s.cmd.Process.Kill()
	<-s.exited
	cli := dockertest.Client(t)
	owned := filters.NewArgs(filters.Arg("label", docker.LabelOwnerPID+"="+strconv.Itoa(pid)))
	ctx := context.Background()
	left, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: owned})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 {
		t.Fatal("the killed server left no container: the test does not test the sweep")
	}
	// Restart: the next docker lease sweeps the dead owner's containers.
	s2 := startServe(t, s.home, s.work, args...)
	code, b := s2.do("GET", "/v1/conversations/"+conv, nil)
	if code != 200 || !strings.Contains(string(b), `"turns":1`) {
		t.Errorf("conversation after the kill: %d %s (want the state before the killed turn)", code, b)
	}
	id, err = s2.start(map[string]any{"prompt": "after the restart", "resume": conv})
	if err != nil {
		t.Fatal(err)
	}
	items, err = s2.follow(id, 0, nil)
	if err != nil || items[len(items)-1].data["error"] != nil {
		t.Fatalf("resume after the restart: %v %s", err, items[len(items)-1].raw)
	}
	if got := items[len(items)-1].data["text"]; !strings.Contains(fmt.Sprint(got), "(turn 2)") {
		t.Errorf("resumed answer %v, want turn 2", got)
	}
	left, err = cli.ContainerList(ctx, container.ListOptions{All: true, Filters: owned})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d containers of the killed server remain after the restart", len(left))
	}
	// The restarted server's own pooled containers go at its shutdown.
	s2.cmd.Process.Signal(syscall.SIGTERM)
	<-s2.exited
	mine := filters.NewArgs(filters.Arg("label", docker.LabelOwnerPID+"="+strconv.Itoa(s2.cmd.Process.Pid)))
	if left, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: mine}); len(left) != 0 {
		t.Errorf("%d containers remain after a clean shutdown", len(left))
	}
}

// TestServeTypeScriptClient runs the TypeScript client's tests (node
// --test) against servers of the built binary; this test binary is also
// the scripted ACP agent their permission test runs (OUTPOST_ACP_AGENT).
func TestServeTypeScriptClient(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "install Node.js 20 or later")
	}
	dir, _ := filepath.Abs("../clients/typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "tsc")); err != nil {
		testenv.Missing(t, "the TypeScript client's dependencies", "scripts/test.sh installs them (npm ci in clients/typescript)")
	}
	build := exec.Command("npm", "run", "build")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build: %v\n%s", err, out)
	}
	// The test files by name: node --test given the directory also runs
	// its helpers (test/setup.ts) as test files.
	files, err := filepath.Glob(filepath.Join(dir, "dist", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no built test files in %s/dist/test: %v", dir, err)
	}
	cmd := exec.Command(node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = dir
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "OUTPOST_BIN="+outpostBinary(t), "OUTPOST_HOME="+t.TempDir(), "OUTPOST_ACP_AGENT="+self)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}
