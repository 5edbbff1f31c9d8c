package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRecordGolden runs the real Codex and Copilot CLIs against this fake and writes the
// golden files under harness/codex/testdata/golden and harness/copilot/testdata/golden.
// It is skipped unless OUTPOST_RECORD_GOLDEN is "codex", "copilot" or "all":
//
//	OUTPOST_RECORD_GOLDEN=all go test -count=1 -timeout 30m -run '^TestRecordGolden$' ./internal/fakeapi/openai/
//
// OUTPOST_RECORD_CASES (a regexp) limits the cases; OUTPOST_GOLDEN_SCRATCH (default
// /tmp/outpost-golden) is where the per-case HOME and work directories are made afresh.
// The CLIs must be installed under ${OUTPOST_CACHE:-$HOME/.cache/outpost}/npm (see
// scripts/install-clis.sh). Nothing is ever sent off this machine: the CLIs talk to the
// fake on 127.0.0.1.
func TestRecordGolden(t *testing.T) {
	which := os.Getenv("OUTPOST_RECORD_GOLDEN")
	if which == "" {
		t.Skip("OUTPOST_RECORD_GOLDEN not set")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	scratch := os.Getenv("OUTPOST_GOLDEN_SCRATCH")
	if scratch == "" {
		scratch = "/tmp/outpost-golden"
	}
	var filter *regexp.Regexp
	if f := os.Getenv("OUTPOST_RECORD_CASES"); f != "" {
		filter = regexp.MustCompile(f)
	}
	cache := os.Getenv("OUTPOST_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "outpost")
	}
	if which == "codex" || which == "all" {
		bin := filepath.Join(cache, "npm", "@openai+codex@0.171.0", "node_modules", ".bin", "codex")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("codex not installed: %v", err)
		}
		rec := &recorder{t: t, bin: bin, name: "codex", out: filepath.Join(root, "harness", "codex", "testdata", "golden"),
			scratch: filepath.Join(scratch, "codex"), filter: filter}
		recordCodex(rec)
	}
	if which == "copilot" || which == "all" {
		bin := filepath.Join(cache, "npm", "@github+copilot@1.0.102", "node_modules", ".bin", "copilot")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("copilot not installed: %v", err)
		}
		rec := &recorder{t: t, bin: bin, name: "copilot", out: filepath.Join(root, "harness", "copilot", "testdata", "golden"),
			scratch: filepath.Join(scratch, "copilot"), filter: filter}
		recordCopilot(rec)
	}
}

// goldenPATH is the PATH given to the CLIs (node must be on it for the npm shims).
const goldenPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxGolden is the size limit of one golden file.
const maxGolden = 100 << 10

type recorder struct {
	t       *testing.T
	bin     string // CLI entry point
	name    string // "codex" or "copilot": argv[0] as written to meta files
	out     string // golden directory
	scratch string
	filter  *regexp.Regexp
}

func (r *recorder) want(name string) bool { return r.filter == nil || r.filter.MatchString(name) }

// caseDirs makes fresh DIR/home and DIR/work for a case.
func (r *recorder) caseDirs(name string) (dir, home, work string) {
	dir = filepath.Join(r.scratch, name)
	if err := os.RemoveAll(dir); err != nil {
		r.t.Fatal(err)
	}
	home, work = filepath.Join(dir, "home"), filepath.Join(dir, "work")
	for _, d := range []string{home, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			r.t.Fatal(err)
		}
	}
	return dir, home, work
}

type invocation struct {
	args      []string
	env       []string
	dir       string
	killAfter time.Duration // SIGTERM to the process group after this (0: never)
	timeout   time.Duration // SIGKILL to the process group after this (default 3m)
}

type result struct {
	stdout    []byte
	stderr    []byte
	exit      int // 128+signal when killed
	start     time.Time
	elapsed   time.Duration
	lineMS    []int64 // arrival of each stdout line, ms after start
	killed    string
	killedAtM int64
}

// run starts the CLI in its own process group with stdin = /dev/null.
func (r *recorder) run(inv invocation) result {
	if inv.timeout == 0 {
		inv.timeout = 3 * time.Minute
	}
	cmd := exec.Command(r.bin, inv.args...)
	cmd.Env = inv.env
	cmd.Dir = inv.dir
	cmd.Stdin = nil // /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	res := result{start: time.Now()}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	var out bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		br := bufio.NewReader(pipe)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				out.Write(line)
				res.lineMS = append(res.lineMS, time.Since(res.start).Milliseconds())
			}
			if err != nil {
				return
			}
		}
	}()
	waitDone := make(chan error, 1)
	go func() {
		<-readDone
		waitDone <- cmd.Wait()
	}()
	pgid := cmd.Process.Pid
	var killTimer <-chan time.Time
	if inv.killAfter > 0 {
		killTimer = time.After(inv.killAfter)
	}
	hard := time.After(inv.timeout)
	var werr error
loop:
	for {
		select {
		case werr = <-waitDone:
			break loop
		case <-killTimer:
			res.killed = "SIGTERM"
			res.killedAtM = time.Since(res.start).Milliseconds()
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			killTimer = nil
			hard = time.After(10 * time.Second)
		case <-hard:
			res.killed = "SIGKILL"
			res.killedAtM = time.Since(res.start).Milliseconds()
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			hard = nil
		}
	}
	res.elapsed = time.Since(res.start)
	res.stdout = out.Bytes()
	res.stderr = stderr.Bytes()
	res.exit = 0
	if werr != nil {
		res.exit = -1
	}
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.exit = 128 + int(ws.Signal())
		} else {
			res.exit = ps.ExitCode()
		}
	}
	// Leftovers (e.g. orphaned sandbox helpers) must not outlive the case.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return res
}

func (r *recorder) write(name string, data []byte) {
	if len(data) > maxGolden {
		r.t.Errorf("golden %s/%s is %d bytes (> %d)", r.out, name, len(data), maxGolden)
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.out, name), data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *recorder) writeJSON(name string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(name, append(b, '\n'))
}

// requestSummaries are the recorded requests as written to meta files, times relative
// to start.
func requestSummaries(s *Server, start time.Time) []map[string]any {
	if s == nil {
		return nil
	}
	var out []map[string]any
	for _, q := range s.Requests() {
		m := map[string]any{
			"seq": q.Seq, "t_ms": q.Time.Sub(start).Milliseconds(), "method": q.Method, "path": q.Path,
			"served": q.Served, "n_input": q.NumInput, "last_item_type": q.LastItemType,
			"last_user": truncate(q.LastUserText, 300), "authorization": q.Authorization(),
		}
		if q.Query != "" {
			m["query"] = q.Query
		}
		if len(q.UserTexts) > 0 {
			var uts []string
			for _, u := range q.UserTexts {
				uts = append(uts, truncate(u, 120))
			}
			m["user_texts"] = uts
		}
		if q.ToolOutput != "" {
			m["tool_output"] = truncate(q.ToolOutput, 300)
		}
		if q.API == APIOther {
			m["user_agent"] = q.Header.Get("User-Agent")
		}
		out = append(out, m)
	}
	return out
}

// save writes NAME.stdout.jsonl, NAME.stderr, NAME.exit and NAME.meta.json.
func (r *recorder) save(name string, inv invocation, res result, fake *Server, extra map[string]any) {
	r.write(name+".stdout.jsonl", res.stdout)
	r.write(name+".stderr", res.stderr)
	r.write(name+".exit", []byte(strconv.Itoa(res.exit)+"\n"))
	meta := map[string]any{
		"argv":           append([]string{r.name}, inv.args...),
		"env":            inv.env,
		"cwd":            inv.dir,
		"stdin":          "/dev/null",
		"exit":           res.exit,
		"elapsed_ms":     res.elapsed.Milliseconds(),
		"stdout_line_ms": res.lineMS,
		"requests":       requestSummaries(fake, res.start),
	}
	if res.killed != "" {
		meta["killed"] = map[string]any{"signal": res.killed, "to": "process group", "at_ms": res.killedAtM}
	}
	for k, v := range extra {
		meta[k] = v
	}
	r.writeJSON(name+".meta.json", meta)
	r.t.Logf("%s/%s: exit=%d elapsed=%v requests=%d", r.name, name, res.exit, res.elapsed.Round(time.Millisecond), len(requestSummaries(fake, res.start)))
}

// jsonLines decodes the JSON lines of out (skipping others).
func jsonLines(out []byte) []map[string]any {
	var lines []map[string]any
	for _, l := range bytes.Split(out, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

// listTree lists the files under dir (relative paths, sizes omitted), sorted.
func listTree(dir string) []byte {
	var paths []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if info.IsDir() {
			rel += "/"
		}
		paths = append(paths, rel)
		return nil
	})
	sort.Strings(paths)
	return []byte(strings.Join(paths, "\n") + "\n")
}

// ---------------------------------------------------------------------------------------
// Codex

// codexEnv is the environment of a Codex run. It creates CODEX_HOME (=HOME/.codex):
// Codex refuses to start when CODEX_HOME does not exist.
func codexEnv(home string, withKey bool) []string {
	_ = os.MkdirAll(filepath.Join(home, ".codex"), 0o755)
	env := []string{"PATH=" + goldenPATH, "HOME=" + home, "CODEX_HOME=" + filepath.Join(home, ".codex")}
	if withKey {
		env = append(env, "OPENAI_API_KEY=sk-fake")
	}
	return env
}

// codexProvider are the -c flags that point Codex at url with bounded retries.
func codexProvider(url string) []string {
	return []string{
		"-c", `model_provider="fake"`,
		"-c", `model_providers.fake.name="fake"`,
		"-c", `model_providers.fake.base_url="` + url + `"`,
		"-c", `model_providers.fake.env_key="OPENAI_API_KEY"`,
		"-c", `model_providers.fake.wire_api="responses"`,
		"-c", `model_providers.fake.request_max_retries=1`,
		"-c", `model_providers.fake.stream_max_retries=1`,
		"-c", `model_providers.fake.stream_idle_timeout_ms=3000`,
	}
}

func codexExecArgs(url string, extra ...string) []string {
	args := []string{"exec", "--json", "--skip-git-repo-check", "-m", "gpt-5.5"}
	args = append(args, codexProvider(url)...)
	return append(args, extra...)
}

func threadID(out []byte) string {
	for _, m := range jsonLines(out) {
		if m["type"] == "thread.started" {
			id, _ := m["thread_id"].(string)
			return id
		}
	}
	return ""
}

// rollout finds CODEX_HOME/sessions/**/rollout-*-<id>.jsonl.
func rollout(codexHome, id string) (rel string, data []byte) {
	if id == "" {
		return "", nil
	}
	matches, _ := filepath.Glob(filepath.Join(codexHome, "sessions", "*", "*", "*", "rollout-*-"+id+".jsonl"))
	if len(matches) == 0 {
		return "", nil
	}
	data, _ = os.ReadFile(matches[0])
	rel, _ = filepath.Rel(codexHome, matches[0])
	return rel, data
}

func sessionMeta(data []byte) map[string]any {
	for _, m := range jsonLines(data) {
		if m["type"] == "session_meta" {
			p, _ := m["payload"].(map[string]any)
			out := map[string]any{}
			for _, k := range []string{"id", "session_id", "forked_from_id", "history_base", "originator", "source", "cwd", "cli_version", "model_provider", "history_mode"} {
				if v, ok := p[k]; ok {
					out[k] = v
				}
			}
			return out
		}
	}
	return nil
}

// trimRollout shortens very long strings (base instructions, tool schemas) so that a
// rollout fits the golden size limit; every line stays valid JSON.
func trimRollout(data []byte) []byte {
	if len(data) <= maxGolden {
		return data
	}
	var out bytes.Buffer
	for _, l := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		var v any
		if json.Unmarshal(l, &v) != nil {
			out.Write(l)
			out.WriteByte('\n')
			continue
		}
		b, _ := json.Marshal(trimStrings(v, 1500))
		out.Write(b)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func trimStrings(v any, n int) any {
	switch x := v.(type) {
	case string:
		if len(x) > n {
			return x[:n] + fmt.Sprintf("…[outpost golden: trimmed %d bytes]", len(x)-n)
		}
		return x
	case []any:
		for i := range x {
			x[i] = trimStrings(x[i], n)
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = trimStrings(x[k], n)
		}
		return x
	}
	return v
}

type codexCase struct {
	name      string
	cfg       Config
	prompt    string
	extra     []string // flags before the prompt
	refused   bool     // point at a port where nothing listens
	noKey     bool     // no OPENAI_API_KEY
	killAfter time.Duration
}

func recordCodex(r *recorder) {
	single := []codexCase{
		{name: "text", prompt: "Say hello"},
		{name: "reasoning", prompt: "Say hello FAKE_REASONING"},
		{name: "tool", prompt: "Run a command FAKE_TOOL", extra: []string{"-s", "workspace-write"}},
		{name: "tool-fail", prompt: "Run a failing command FAKE_TOOL", extra: []string{"-s", "workspace-write"}, cfg: Config{Command: "echo out; echo err >&2; exit 3"}},
		{name: "patch", prompt: "Create hello.txt FAKE_PATCH", extra: []string{"-s", "workspace-write"}},
		{name: "patch-readonly", prompt: "Create hello.txt FAKE_PATCH"},
		{name: "usage-limit", prompt: "x FAKE_USAGE_LIMIT"},
		{name: "insufficient-quota", prompt: "x FAKE_QUOTA"},
		{name: "rate-limit", prompt: "x FAKE_429"},
		{name: "rate-limit-retry-after", prompt: "x FAKE_429_RETRY"},
		{name: "http-500", prompt: "x FAKE_500"},
		{name: "http-503", prompt: "x FAKE_503"},
		{name: "http-401", prompt: "x FAKE_401"},
		{name: "dropped-stream", prompt: "x FAKE_DROP"},
		{name: "truncated-stream", prompt: "x FAKE_TRUNCATE"},
		{name: "response-failed", prompt: "x FAKE_FAILED"},
		{name: "context-window", prompt: "x FAKE_FAILED_CONTEXT"},
		{name: "no-response", prompt: "x FAKE_DISCONNECT"},
		{name: "idle-timeout", prompt: "x FAKE_STALL"},
		{name: "hang", prompt: "x FAKE_HANG", killAfter: 10 * time.Second},
		{name: "conn-refused", prompt: "x refused", refused: true, killAfter: 15 * time.Second},
		{name: "missing-key", prompt: "x", noKey: true},
	}
	for _, c := range single {
		if !r.want(c.name) {
			continue
		}
		_, home, work := r.caseDirs(c.name)
		var fake *Server
		url := ""
		if c.refused {
			var err error
			if url, err = RefusedURL(); err != nil {
				r.t.Fatal(err)
			}
		} else {
			fake = Start(r.t, c.cfg)
			url = fake.URL()
		}
		inv := invocation{args: codexExecArgs(url, append(append([]string{}, c.extra...), c.prompt)...),
			env: codexEnv(home, !c.noKey), dir: work, killAfter: c.killAfter}
		res := r.run(inv)
		extra := map[string]any{}
		codexHome := filepath.Join(home, ".codex")
		if c.name == "text" {
			rel, data := rollout(codexHome, threadID(res.stdout))
			r.write("text.rollout.jsonl", trimRollout(data))
			extra["rollout_path"] = rel
			r.write("text.codex-home.txt", listTree(codexHome))
		}
		if c.name == "patch" || c.name == "patch-readonly" {
			extra["work_tree"] = strings.Fields(string(listTree(work)))
		}
		r.save(c.name, inv, res, fake, extra)
		if fake != nil {
			fake.Close()
		}
	}

	if r.want("resume") {
		recordCodexResume(r)
	}
	if r.want("fork") {
		recordCodexFork(r)
	}
	for _, c := range []string{"appserver-text", "appserver-steer", "appserver-interrupt", "appserver-error"} {
		if r.want(c) {
			recordAppServer(r, c)
		}
	}
}

// recordCodexResume: a first turn, then `exec resume <id>` in a new process; the fake
// echoes what the model received.
func recordCodexResume(r *recorder) {
	_, home, work := r.caseDirs("resume")
	fake := Start(r.t, Config{})
	defer fake.Close()
	codexHome := filepath.Join(home, ".codex")
	inv1 := invocation{args: codexExecArgs(fake.URL(), "-s", "workspace-write", "First turn FAKE_ECHO"), env: codexEnv(home, true), dir: work}
	res1 := r.run(inv1)
	id := threadID(res1.stdout)
	rel1, _ := rollout(codexHome, id)
	r.save("resume-turn1", inv1, res1, fake, map[string]any{"rollout_path": rel1})
	fake.Reset()

	args := []string{"exec", "resume", "--json", "--skip-git-repo-check", "-m", "gpt-5.5"}
	args = append(args, codexProvider(fake.URL())...)
	args = append(args, "-c", `sandbox_mode="workspace-write"`, id, "Second turn FAKE_ECHO")
	inv2 := invocation{args: args, env: codexEnv(home, true), dir: work}
	res2 := r.run(inv2)
	rel2, data := rollout(codexHome, id)
	r.write("resume.rollout.jsonl", trimRollout(data))
	r.save("resume", inv2, res2, fake, map[string]any{"resumed_thread_id": id, "rollout_path": rel2, "session_meta": sessionMeta(data)})
}

// recordCodexFork: a parent turn, `exec fork <parent>`, then `exec resume <fork>`.
func recordCodexFork(r *recorder) {
	_, home, work := r.caseDirs("fork")
	fake := Start(r.t, Config{})
	defer fake.Close()
	codexHome := filepath.Join(home, ".codex")
	inv1 := invocation{args: codexExecArgs(fake.URL(), "-s", "workspace-write", "Parent turn FAKE_ECHO"), env: codexEnv(home, true), dir: work}
	res1 := r.run(inv1)
	parent := threadID(res1.stdout)
	relP, dataP := rollout(codexHome, parent)
	r.write("fork-parent.rollout.jsonl", trimRollout(dataP))
	r.save("fork-parent", inv1, res1, fake, map[string]any{"rollout_path": relP})
	fake.Reset()

	args := []string{"exec", "fork", "--json", "--skip-git-repo-check", "-m", "gpt-5.5"}
	args = append(args, codexProvider(fake.URL())...)
	args = append(args, "-c", `sandbox_mode="workspace-write"`, parent, "Forked turn FAKE_ECHO")
	inv2 := invocation{args: args, env: codexEnv(home, true), dir: work}
	res2 := r.run(inv2)
	child := threadID(res2.stdout)
	relF, dataF := rollout(codexHome, child)
	r.write("fork.rollout.jsonl", trimRollout(dataF))
	r.save("fork", inv2, res2, fake, map[string]any{"parent_thread_id": parent, "fork_thread_id": child, "rollout_path": relF, "session_meta": sessionMeta(dataF)})
	fake.Reset()

	args = []string{"exec", "resume", "--json", "--skip-git-repo-check", "-m", "gpt-5.5"}
	args = append(args, codexProvider(fake.URL())...)
	args = append(args, "-c", `sandbox_mode="workspace-write"`, child, "Fork resumed FAKE_ECHO")
	inv3 := invocation{args: args, env: codexEnv(home, true), dir: work}
	res3 := r.run(inv3)
	relR, dataR := rollout(codexHome, child)
	r.write("fork-resume.rollout.jsonl", trimRollout(dataR))
	_, dataP2 := rollout(codexHome, parent)
	r.save("fork-resume", inv3, res3, fake, map[string]any{"parent_thread_id": parent, "fork_thread_id": child, "rollout_path": relR,
		"session_meta": sessionMeta(dataR), "parent_rollout_unchanged": bytes.Equal(dataP, dataP2)})
}

// ---------------------------------------------------------------------------------------
// Codex app-server (JSON-RPC over stdio)

type rpcLine struct {
	Dir string          `json:"dir"` // ">>" client to codex, "<<" codex to client
	TMS int64           `json:"t_ms"`
	Msg json.RawMessage `json:"msg"`
}

type rpcClient struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	start  time.Time
	in     chan map[string]any
	mu     sync.Mutex
	log    []rpcLine
	nextID int
	stderr bytes.Buffer
	done   chan struct{}
}

func startRPC(t *testing.T, bin string, args, env []string, dir string) *rpcClient {
	c := &rpcClient{t: t, start: time.Now(), in: make(chan map[string]any, 10000), nextID: 1, done: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env, c.cmd.Dir = env, dir
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadBytes('\n')
			line = bytes.TrimRight(line, "\r\n")
			if len(line) > 0 {
				raw := json.RawMessage(append([]byte(nil), line...))
				if !json.Valid(raw) {
					raw, _ = json.Marshal(string(line))
				}
				c.mu.Lock()
				c.log = append(c.log, rpcLine{Dir: "<<", TMS: time.Since(c.start).Milliseconds(), Msg: raw})
				c.mu.Unlock()
				var m map[string]any
				if json.Unmarshal(line, &m) == nil {
					c.in <- m
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *rpcClient) send(m map[string]any) {
	b, _ := json.Marshal(m)
	c.mu.Lock()
	c.log = append(c.log, rpcLine{Dir: ">>", TMS: time.Since(c.start).Milliseconds(), Msg: b})
	c.mu.Unlock()
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Errorf("app-server stdin: %v", err)
	}
}

func (c *rpcClient) request(method string, params any) int {
	id := c.nextID
	c.nextID++
	m := map[string]any{"id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	c.send(m)
	return id
}

func (c *rpcClient) notify(method string) { c.send(map[string]any{"method": method}) }

// waitFor reads messages until pred matches one (returned) or the timeout passes.
func (c *rpcClient) waitFor(timeout time.Duration, what string, pred func(map[string]any) bool) map[string]any {
	deadline := time.After(timeout)
	for {
		select {
		case m := <-c.in:
			if pred(m) {
				return m
			}
		case <-deadline:
			c.t.Errorf("app-server: timed out waiting for %s", what)
			return nil
		}
	}
}

func (c *rpcClient) response(id int) map[string]any {
	return c.waitFor(30*time.Second, fmt.Sprintf("response %d", id), func(m map[string]any) bool {
		v, ok := m["id"].(float64)
		_, isReq := m["method"]
		return ok && int(v) == id && !isReq
	})
}

func isMethod(name string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == name && m["id"] == nil }
}

// finish closes stdin and waits for the process (SIGTERM to its group after 10 s).
func (c *rpcClient) finish() (exit int, lines []byte) {
	_ = c.stdin.Close()
	waited := make(chan struct{})
	go func() { <-c.done; _ = c.cmd.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		<-waited
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	exit = c.cmd.ProcessState.ExitCode()
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		exit = 128 + int(ws.Signal())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var buf bytes.Buffer
	for _, l := range c.log {
		b, _ := json.Marshal(l)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return exit, buf.Bytes()
}

func dig(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func recordAppServer(r *recorder, name string) {
	_, home, work := r.caseDirs(name)
	fake := Start(r.t, Config{DeltaDelay: 250 * time.Millisecond, SlowChunks: 24})
	defer fake.Close()
	args := append([]string{"app-server", "-c", `model="gpt-5.5"`}, codexProvider(fake.URL())...)
	env := codexEnv(home, true)
	c := startRPC(r.t, r.bin, args, env, work)
	defer func() { _ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) }()

	id := c.request("initialize", map[string]any{"clientInfo": map[string]any{"name": "outpost", "title": "Outpost", "version": "0.0.1"}})
	c.response(id)
	c.notify("initialized")
	id = c.request("thread/start", map[string]any{"cwd": work, "approvalPolicy": "never", "sandbox": "workspace-write"})
	resp := c.response(id)
	thread, _ := dig(resp, "result", "thread", "id").(string)
	text := func(s string) []any { return []any{map[string]any{"type": "text", "text": s}} }
	turnCompleted := isMethod("turn/completed")
	extra := map[string]any{"thread_id": thread}

	switch name {
	case "appserver-text":
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("Say hello")})
		c.response(id)
		c.waitFor(30*time.Second, "turn/completed", turnCompleted)
	case "appserver-error":
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("x FAKE_500")})
		c.response(id)
		c.waitFor(60*time.Second, "turn/completed", turnCompleted)
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("x FAKE_USAGE_LIMIT")})
		c.response(id)
		c.waitFor(60*time.Second, "turn/completed", turnCompleted)
	case "appserver-steer":
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("Count slowly FAKE_SLOW")})
		turn, _ := dig(c.response(id), "result", "turn", "id").(string)
		c.waitFor(30*time.Second, "first delta", isMethod("item/agentMessage/delta"))
		c.waitFor(30*time.Second, "third delta", isMethod("item/agentMessage/delta"))
		id = c.request("turn/steer", map[string]any{"threadId": thread, "expectedTurnId": turn, "input": text("Steer: stop counting and say done")})
		c.response(id)
		c.waitFor(60*time.Second, "turn/completed", turnCompleted)
		// A steer on an idle thread is an error.
		id = c.request("turn/steer", map[string]any{"threadId": thread, "expectedTurnId": turn, "input": text("too late")})
		c.response(id)
		extra["turn_id"] = turn
	case "appserver-interrupt":
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("Count slowly FAKE_SLOW")})
		turn, _ := dig(c.response(id), "result", "turn", "id").(string)
		c.waitFor(30*time.Second, "first delta", isMethod("item/agentMessage/delta"))
		id = c.request("turn/interrupt", map[string]any{"threadId": thread, "turnId": turn})
		c.response(id)
		c.waitFor(30*time.Second, "turn/completed", turnCompleted)
		id = c.request("turn/start", map[string]any{"threadId": thread, "input": text("After the interrupt FAKE_ECHO")})
		c.response(id)
		c.waitFor(30*time.Second, "turn/completed", turnCompleted)
		extra["turn_id"] = turn
	}
	exit, log := c.finish()
	r.write(name+".jsonl", log)
	r.write(name+".stderr", c.stderr.Bytes())
	r.write(name+".exit", []byte(strconv.Itoa(exit)+"\n"))
	extra["argv"] = append([]string{"codex"}, args...)
	extra["env"] = env
	extra["cwd"] = work
	extra["stdin"] = "pipe (JSON-RPC requests, one per line); closed at the end"
	extra["exit"] = exit
	extra["requests"] = requestSummaries(fake, c.start)
	r.writeJSON(name+".meta.json", extra)
	r.t.Logf("codex/%s: exit=%d requests=%d", name, exit, fake.Count())
}

// ---------------------------------------------------------------------------------------
// Copilot

// Fixed session ids so that re-recording gives the same ids.
const (
	copilotTextID   = "0a0a0a0a-0000-4000-8000-000000000001"
	copilotResumeID = "0a0a0a0a-0000-4000-8000-000000000002"
)

func copilotEnv(home, cache, url string) []string {
	return []string{
		"PATH=" + goldenPATH, "HOME=" + home, "XDG_CACHE_HOME=" + cache,
		"COPILOT_HOME=" + filepath.Join(home, ".copilot"),
		"COPILOT_OFFLINE=true",
		"COPILOT_PROVIDER_BASE_URL=" + url,
		"COPILOT_PROVIDER_API_KEY=fake-key",
		"COPILOT_MODEL=gpt-4.1",
	}
}

type copilotCase struct {
	name      string
	prompt    string
	session   string // --session-id (default: a fixed id per case)
	refused   bool
	killAfter time.Duration
}

func recordCopilot(r *recorder) {
	cache := filepath.Join(r.scratch, "xdg-cache") // shared: the CLI unpacks ~235 MB there on first use
	cases := []copilotCase{
		{name: "text", prompt: "Say hello", session: copilotTextID},
		{name: "tool", prompt: "Run a command FAKE_TOOL"},
		{name: "rate-limit", prompt: "x FAKE_429"},
		{name: "rate-limit-retry-after", prompt: "x FAKE_429_RETRY"},
		{name: "insufficient-quota", prompt: "x FAKE_QUOTA"},
		{name: "http-500", prompt: "x FAKE_500"},
		{name: "http-503", prompt: "x FAKE_503"},
		{name: "conn-refused", prompt: "x refused", refused: true, killAfter: 90 * time.Second},
		{name: "http-401", prompt: "x FAKE_401"},
		{name: "dropped-stream", prompt: "x FAKE_DROP"},
	}
	for i, c := range cases {
		if !r.want(c.name) {
			continue
		}
		dir, home, work := r.caseDirs(c.name)
		var fake *Server
		url := ""
		if c.refused {
			var err error
			if url, err = RefusedURL(); err != nil {
				r.t.Fatal(err)
			}
		} else {
			fake = Start(r.t, Config{})
			url = fake.URL()
		}
		sid := c.session
		if sid == "" {
			sid = fmt.Sprintf("0a0a0a0a-0000-4000-8000-%012d", 100+i)
		}
		usage := filepath.Join(dir, "usage.json")
		inv := invocation{args: []string{"-p", c.prompt, "--output-format", "json", "--allow-all-tools", "--no-auto-update",
			"--session-id=" + sid, "--usage-output-file", usage}, env: copilotEnv(home, cache, url), dir: work, killAfter: c.killAfter}
		res := r.run(inv)
		extra := map[string]any{"session_id": sid}
		if b, err := os.ReadFile(usage); err == nil {
			r.write(c.name+".usage.json", b)
		} else {
			extra["usage_file"] = "not written: " + err.Error()
		}
		if c.name == "text" {
			sdir := filepath.Join(home, ".copilot", "session-state", sid)
			if b, err := os.ReadFile(filepath.Join(sdir, "events.jsonl")); err == nil {
				r.write("text.events.jsonl", b)
			}
			if b, err := os.ReadFile(filepath.Join(sdir, "workspace.yaml")); err == nil {
				r.write("text.workspace.yaml", b)
			}
			r.write("text.copilot-home.txt", listTree(filepath.Join(home, ".copilot")))
		}
		r.save(c.name, inv, res, fake, extra)
		if fake != nil {
			fake.Close()
		}
	}
	if r.want("resume") {
		dir, home, work := r.caseDirs("resume")
		fake := Start(r.t, Config{})
		defer fake.Close()
		env := copilotEnv(home, cache, fake.URL())
		usage1 := filepath.Join(dir, "usage-turn1.json")
		inv1 := invocation{args: []string{"-p", "First turn FAKE_ECHO", "--output-format", "json", "--allow-all-tools", "--no-auto-update",
			"--session-id=" + copilotResumeID, "--usage-output-file", usage1}, env: env, dir: work}
		res1 := r.run(inv1)
		if b, err := os.ReadFile(usage1); err == nil {
			r.write("resume-turn1.usage.json", b)
		}
		r.save("resume-turn1", inv1, res1, fake, map[string]any{"session_id": copilotResumeID})
		fake.Reset()
		usage2 := filepath.Join(dir, "usage.json")
		inv2 := invocation{args: []string{"-p", "Second turn FAKE_ECHO", "--output-format", "json", "--allow-all-tools", "--no-auto-update",
			"--resume=" + copilotResumeID, "--usage-output-file", usage2}, env: env, dir: work}
		res2 := r.run(inv2)
		if b, err := os.ReadFile(usage2); err == nil {
			r.write("resume.usage.json", b)
		}
		r.save("resume", inv2, res2, fake, map[string]any{"session_id": copilotResumeID})
	}
}
