package declarative_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/harnesstest"
)

var (
	standInOnce sync.Once
	standInDir  string
	standInErr  error
)

// aiderStandIn builds testdata/aider once per test binary.
func aiderStandIn(t testing.TB) string {
	t.Helper()
	standInOnce.Do(func() {
		standInDir, standInErr = os.MkdirTemp("", "aider-standin-")
		if standInErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(standInDir, "aider"), "./testdata/aider").CombinedOutput()
		if err != nil {
			standInErr = errors.New("go build ./testdata/aider: " + err.Error() + "\n" + string(out))
		}
	})
	if standInErr != nil {
		t.Fatal(standInErr)
	}
	return filepath.Join(standInDir, "aider")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if standInDir != "" {
		os.RemoveAll(standInDir)
	}
	os.Exit(code)
}

// sandbox is a host directory pair standing in for a lease: the
// declarative tests run the stand-in directly, the engine tests in
// sandbox/ run it through the turn engine.
type hostDirs struct {
	home, wd string
	env      []string
}

func newSandbox(t *testing.T, env ...string) *hostDirs {
	return &hostDirs{home: t.TempDir(), wd: t.TempDir(), env: env}
}

// exec runs cmd the way the engine does: its files written into the home,
// its program replaced by the stand-in.
func (s *hostDirs) exec(t *testing.T, bin string, cmd harness.Command) (stdout, stderr []byte, exit int) {
	t.Helper()
	for _, f := range cmd.Files {
		p := filepath.Join(s.home, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := exec.Command(bin, cmd.Args...)
	if cmd.Path != "aider" && bin == "" {
		c = exec.Command(cmd.Path, cmd.Args...)
	}
	c.Dir = s.wd
	c.Env = append([]string{"HOME=" + s.home, "PATH=" + os.Getenv("PATH")}, s.env...)
	for k, v := range cmd.Env {
		c.Env = append(c.Env, k+"="+v)
	}
	if cmd.Stdin != nil {
		c.Stdin = bytes.NewReader(cmd.Stdin)
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.Bytes(), errb.Bytes(), c.ProcessState.ExitCode()
}

// decode runs a fresh decoder over stdout and, for presets that ask for
// it, once more with the end-of-output nil line.
func decode(h *harness.Harness, stdout []byte) []harness.Event {
	dec := harnesstest.Decoder(h)
	var evs []harness.Event
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		evs = append(evs, dec(append([]byte(nil), sc.Bytes()...))...)
	}
	if h.DecodeEnd {
		evs = append(evs, dec(nil)...)
	}
	return evs
}

// outcome classifies the end of a turn the way the engine's classifier
// does (sandbox tests prove the engine itself): quota before
// misconfigured before the rest.
func outcome(h *harness.Harness, evs []harness.Event, exit int) string {
	var failures []string
	for _, ev := range evs {
		if ev.Type == harness.EventFailure {
			failures = append(failures, ev.Text)
		}
	}
	if exit == 0 && len(failures) == 0 {
		return "ok"
	}
	for _, f := range failures {
		if h.Quota != nil && h.Quota(f) {
			return "quota"
		}
	}
	for _, f := range failures {
		if h.Misconfigured != nil && h.Misconfigured(f) {
			return "configuration"
		}
	}
	for _, f := range failures {
		if h.Unavailable != nil && h.Unavailable(f) {
			return "process+unavailable"
		}
	}
	return "process"
}

func finalOf(evs []harness.Event) (text string, u *harness.Usage) {
	for _, ev := range evs {
		if ev.Type == harness.EventFinished {
			text, u = ev.Text, ev.Usage
		}
	}
	return text, u
}

func kinds(evs []harness.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, harnesstest.EventLine(ev))
	}
	return out
}

const key = "OPENAI_API_KEY=sk-test"

func TestAiderStandIn(t *testing.T) {
	bin := aiderStandIn(t)
	h := declarative.Aider()
	cases := []struct {
		name, prompt string
		env          []string
		want         string
		events       []string
	}{
		{"text", "hello", []string{key}, "ok", []string{"message delta", "message delta", "usage", "finished"}},
		{"edit", "write hello.py AIDER_EDIT", []string{key}, "ok", []string{"message delta", "message delta", "notice", "notice", "usage", "finished"}},
		{"retry", "x AIDER_RETRY", []string{key}, "ok", []string{"notice/retry", "message delta", "message delta", "usage", "finished"}},
		{"quota", "x AIDER_QUOTA", []string{key}, "quota", []string{"notice/retry", "notice/retry", "failure", "finished"}},
		{"outage", "x AIDER_OUTAGE", []string{key}, "process+unavailable", []string{"notice/retry", "failure", "failure", "finished"}},
		{"auth", "x AIDER_AUTH", []string{key}, "configuration", []string{"failure", "failure", "finished"}},
		{"no-key", "hello", nil, "configuration", []string{"failure", "failure", "finished"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, c.env...)
			cmd, err := h.Request(harness.Input{Prompt: c.prompt, Home: sb.home, Workdir: sb.wd})
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, exit := sb.exec(t, bin, cmd)
			if len(errOut) > 0 {
				t.Logf("stderr: %s", errOut)
			}
			evs := decode(h, out)
			if diff := cmp.Diff(c.events, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s\nstdout:\n%s", diff, out)
			}
			if got := outcome(h, evs, exit); got != c.want {
				t.Errorf("outcome %s, want %s", got, c.want)
			}
			if c.want == "ok" {
				text, u := finalOf(evs)
				if want := "aider: " + c.prompt + " (turn 1)\nDone."; text != want {
					t.Errorf("final text %q, want %q", text, want)
				}
				// "2.1k sent": rounded, so incomplete.
				if u == nil || u.InputTokens != 2100 || u.OutputTokens == 0 || u.Complete {
					t.Errorf("usage %+v, want 2100 input tokens, some output, incomplete", u)
				}
			}
		})
	}
}

// TestAiderConversation: a conversation is resumed with
// --restore-chat-history and forked into a copy with a distinct id, all
// within the files the preset's storage matches.
func TestAiderConversation(t *testing.T) {
	bin := aiderStandIn(t)
	h := declarative.Aider()
	sb := newSandbox(t, key)
	turn := func(in harness.Input) (harness.Command, string) {
		t.Helper()
		in.Home, in.Workdir = sb.home, sb.wd
		cmd, err := h.Request(in)
		if err != nil {
			t.Fatal(err)
		}
		out, _, exit := sb.exec(t, bin, cmd)
		evs := decode(h, out)
		if o := outcome(h, evs, exit); o != "ok" {
			t.Fatalf("outcome %s:\n%s", o, out)
		}
		text, _ := finalOf(evs)
		return cmd, text
	}
	first, text := turn(harness.Input{Prompt: "one"})
	if first.Session == "" || !strings.HasSuffix(text, "(turn 1)\nDone.") {
		t.Fatalf("first turn: session %q, text %q", first.Session, text)
	}
	second, text := turn(harness.Input{Prompt: "two", Conversation: first.Session})
	if second.Session != first.Session || !strings.Contains(text, "(turn 2)") {
		t.Fatalf("resume: session %q (want %q), text %q", second.Session, first.Session, text)
	}
	if !h.Forks() || h.Fork == nil {
		t.Fatal("aider must fork with its fork command")
	}
	runner := func(ctx context.Context, c harness.Command) (harness.RunResult, error) {
		out, errOut, exit := sb.exec(t, "", c)
		return harness.RunResult{Stdout: out, Stderr: errOut, Status: harness.ExitStatus{Code: exit}}, nil
	}
	child, err := h.Fork(context.Background(), first.Session, runner)
	if err != nil {
		t.Fatal(err)
	}
	if child == "" || child == first.Session {
		t.Fatalf("fork gave %q from %q: want a distinct id", child, first.Session)
	}
	_, text = turn(harness.Input{Prompt: "three", Conversation: child})
	if !strings.Contains(text, "(turn 3)") {
		t.Errorf("fork: text %q, want the parent's two turns and this one", text)
	}
	_, text = turn(harness.Input{Prompt: "three", Conversation: first.Session})
	if !strings.Contains(text, "(turn 3)") {
		t.Errorf("parent after the fork: %q, want turn 3 (the child's turn is not in it)", text)
	}
	// The storage matches exactly the conversation's files.
	var matched []string
	root := filepath.Join(sb.home, h.Storage.Roots[0])
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if h.Storage.Match(e.Name(), child) {
			matched = append(matched, e.Name())
		}
	}
	if diff := cmp.Diff([]string{child + ".input", child + ".md"}, matched); diff != "" {
		t.Errorf("storage of the child (-want +got):\n%s", diff)
	}
}

func TestAiderRequest(t *testing.T) {
	h := declarative.Aider()
	cmd, err := h.Request(harness.Input{Prompt: "hi", Home: "/home/a", Workdir: "/w", Model: "sonnet", ExtraArgs: []string{"--no-auto-commits"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmd.Files) != 1 || string(cmd.Files[0].Content) != "hi" || !strings.HasPrefix(cmd.Files[0].Path, declarative.PromptDir+"/") {
		t.Fatalf("prompt file %+v", cmd.Files)
	}
	id := cmd.Session
	want := []string{"--message-file", "/home/a/" + cmd.Files[0].Path, "--yes-always", "--no-pretty", "--no-stream", "--no-check-update", "--analytics-disable",
		"--model", "sonnet", "--chat-history-file", "/home/a/.aider/history/" + id + ".md", "--input-history-file", "/home/a/.aider/history/" + id + ".input", "--no-auto-commits"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"--message=x", "-m", "--yes", "--model", "--restore-chat-history", "--chat-history-file=/x", "a\x00b"} {
		if _, err := h.Request(harness.Input{Prompt: "hi", ExtraArgs: []string{bad}}); err == nil {
			t.Errorf("extra argument %q accepted", bad)
		}
	}
	if _, err := h.Request(harness.Input{Prompt: "hi", Options: map[string]string{"x": "y"}}); err == nil {
		t.Error("an option accepted")
	}
	if _, err := h.Request(harness.Input{Prompt: "hi", Conversation: "../x"}); err == nil {
		t.Error("a conversation id that is a path accepted")
	}
	plan, err := h.Credentials(harness.Vars{"ANTHROPIC_API_KEY": "k", "HOME": "/h", "UNRELATED": "u"})
	if err != nil || len(plan.Variables) != 1 || plan.Variables["ANTHROPIC_API_KEY"] != "k" {
		t.Errorf("credentials %+v %v", plan, err)
	}
}

// The aider goldens are the stand-in's output (not recordings of aider):
// TestAiderGoldens keeps them in step; the conformance suite decodes them.
var goldenPrompts = map[string]string{
	"text": "hello", "edit": "write hello.py AIDER_EDIT", "retry": "x AIDER_RETRY",
	"quota": "x AIDER_QUOTA", "outage": "x AIDER_OUTAGE", "auth": "x AIDER_AUTH",
}

func TestAiderGoldens(t *testing.T) {
	bin := aiderStandIn(t)
	h := declarative.Aider()
	for name, prompt := range goldenPrompts {
		t.Run(name, func(t *testing.T) {
			sb := newSandbox(t, key)
			cmd, err := h.Request(harness.Input{Prompt: prompt, Home: sb.home, Workdir: sb.wd})
			if err != nil {
				t.Fatal(err)
			}
			out, _, _ := sb.exec(t, bin, cmd)
			path := filepath.Join("testdata/golden", name+harnesstest.StdoutSuffix)
			if harnesstest.Update() {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(want, out) {
				t.Errorf("%s differs from the stand-in's output:\n--- golden\n%s\n--- stand-in\n%s", path, want, out)
			}
		})
	}
}

func TestAiderConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, declarative.Aider(), "testdata/golden")
}

func FuzzAiderEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, declarative.Aider(), "testdata/golden")
}
