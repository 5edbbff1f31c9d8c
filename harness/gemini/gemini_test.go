package gemini_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/gemini"
)

const parent = "c0a661e0-6bc8-44f3-8473-e109b6eb417d"

func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      harness.Input
		want    []string // after the prompt; "NEW" is the minted id
		wantErr string
	}{
		{"new", harness.Input{Prompt: "hi"}, []string{"--output-format", "stream-json", "--skip-trust", "--session-id", "NEW", "--approval-mode", "yolo"}, ""},
		{"resume with model and mode", harness.Input{Prompt: "-x", Conversation: parent, Model: "gemini-2.5-flash", Options: map[string]string{"approval-mode": "plan"}},
			[]string{"--output-format", "stream-json", "--skip-trust", "--resume", parent, "--model", "gemini-2.5-flash", "--approval-mode", "plan"}, ""},
		{"fork resumes the child", harness.Input{Prompt: "hi", Conversation: parent, Fork: true},
			[]string{"--output-format", "stream-json", "--skip-trust", "--resume", parent, "--approval-mode", "yolo"}, ""},
		{"extra args", harness.Input{Prompt: "hi", Conversation: parent, ExtraArgs: []string{"--include-directories", "/x"}},
			[]string{"--output-format", "stream-json", "--skip-trust", "--resume", parent, "--approval-mode", "yolo", "--include-directories", "/x"}, ""},
		{"bad id", harness.Input{Prompt: "hi", Conversation: "latest"}, nil, "not a Gemini CLI session id"},
		{"bad option", harness.Input{Prompt: "hi", Options: map[string]string{"sandbox": "1"}}, nil, "unknown option"},
		{"bad mode", harness.Input{Prompt: "hi", Options: map[string]string{"approval-mode": "all"}}, nil, "unknown mode"},
		{"bad model", harness.Input{Prompt: "hi", Model: "a b"}, nil, "invalid model"},
		{"reserved", harness.Input{Prompt: "hi", ExtraArgs: []string{"--yolo"}}, nil, "approval-mode option"},
		{"session file", harness.Input{Prompt: "hi", ExtraArgs: []string{"--session-file=/x"}}, nil, "use Fork"},
		{"nul", harness.Input{Prompt: "a\x00b"}, nil, "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := gemini.Request(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Path != "gemini" || cmd.Args[0] != "--prompt="+tc.in.Prompt {
				t.Fatalf("command %s %q", cmd.Path, cmd.Args)
			}
			want := append([]string(nil), tc.want...)
			for i, a := range want {
				if a == "NEW" {
					want[i] = cmd.Session
				}
			}
			if diff := cmp.Diff(want, cmd.Args[1:]); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			wantSession := tc.in.Conversation
			if wantSession == "" && !gemini.ValidSessionID(cmd.Session) {
				t.Errorf("minted session %q is not a UUID", cmd.Session)
			} else if wantSession != "" && cmd.Session != wantSession {
				t.Errorf("session = %q, want %q", cmd.Session, wantSession)
			}
		})
	}
}

func TestRequestLongPromptOnStdin(t *testing.T) {
	p := strings.Repeat("x", gemini.MaxArgPrompt+1)
	cmd, err := gemini.Request(harness.Input{Prompt: p})
	if err != nil {
		t.Fatal(err)
	}
	if string(cmd.Stdin) != p || strings.Contains(strings.Join(cmd.Args, " "), "xxxx") {
		t.Fatalf("the long prompt is not on stdin only")
	}
}

func decodeFile(t *testing.T, name string) []harness.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := gemini.NewDecoder()
	var evs []harness.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		evs = append(evs, d.Decode(sc.Bytes())...)
	}
	return evs
}

// TestDecodeToolTurn: the recorded turn (text after a shell call) gives
// the tool call and result, the answer after the call, and the usage the
// fake reported (1200 prompt tokens of which 1000 cached, 9 candidates and
// 21 thoughts, twice).
func TestDecodeToolTurn(t *testing.T) {
	evs := decodeFile(t, "tool.stdout.jsonl")
	var call, result *harness.Tool
	var usage *harness.Usage
	var fin harness.Event
	for _, ev := range evs {
		switch ev.Type {
		case harness.EventToolCall:
			call = ev.Tool
		case harness.EventToolResult:
			result = ev.Tool
		case harness.EventUsage:
			usage = ev.Usage
		case harness.EventFinished:
			fin = ev
		}
	}
	if call == nil || call.Name != "run_shell_command" || !strings.Contains(string(call.Input), `"command":"echo tool-ran"`) {
		t.Fatalf("tool call = %+v", call)
	}
	if result == nil || result.ID != call.ID || result.Output != "tool-ran" || result.Error {
		t.Fatalf("tool result = %+v", result)
	}
	want := &harness.Usage{InputTokens: 2 * 200, OutputTokens: 2 * (9 + 21), CacheReadTokens: 2 * 1000, Complete: true}
	if diff := cmp.Diff(want, usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(fin.Text, "Tool output was:") || fin.Stop != "end_turn" {
		t.Errorf("finished = %+v", fin)
	}
	if evs[0].Type != harness.EventSession || evs[0].Session != "3462bad5-6ec1-49b5-b3fa-f8b028723af6" {
		t.Errorf("first event = %+v", evs[0])
	}
}

// TestClassify runs the hooks on the real CLI's terminal texts (the
// result's error and standard error) and on its retry notices.
func TestClassify(t *testing.T) {
	failure := func(name string) string {
		for _, ev := range decodeFile(t, name) {
			if ev.Type == harness.EventFailure {
				return ev.Text
			}
		}
		t.Fatalf("%s: no failure event", name)
		return ""
	}
	h := gemini.Harness()
	for _, tc := range []struct {
		name                     string
		text                     string
		quota, unavailable, conf bool
	}{
		{"daily quota", failure("quota.stdout.jsonl"), true, false, false},
		{"503 after retries", failure("unavailable.stdout.jsonl"), false, true, false},
		{"unreachable", failure("unreachable.stdout.jsonl"), false, true, false},
		{"broken stream", failure("dropped.stdout.jsonl"), false, true, false},
		{"broken stream's report", "Error when talking to Gemini API Full report available at: /tmp/r.json TypeError: terminated\n  [cause]: SocketError: other side closed\n    code: 'UND_ERR_SOCKET',", false, true, false},
		{"a tool's text", "the process was terminated", false, false, false},
		{"429 after retries", "[API Error: Resource has been exhausted (e.g. check quota).]", true, false, false},
		{"bad key", `[API Error: {"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}]`, false, false, true},
		{"auth", "Invalid auth method selected.", false, false, true},
		{"retry 503", "Attempt 1 failed with status 503. Retrying with backoff... _ApiError: {\"error\":{\"code\":503,\"message\":\"The model is overloaded. Please try again later.\",\"status\":\"UNAVAILABLE\"}}", false, false, false},
		{"retry fetch", "Attempt 2 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request", false, false, false},
		{"retry 429", "Attempt 1 failed with status 429. Retrying with backoff... _ApiError: Resource has been exhausted (e.g. check quota).", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.Quota(tc.text); got != tc.quota {
				t.Errorf("Quota = %v", got)
			}
			if got := h.Unavailable(tc.text); got != tc.unavailable {
				t.Errorf("Unavailable = %v", got)
			}
			if got := h.Misconfigured(tc.text); got != tc.conf {
				t.Errorf("Misconfigured = %v", got)
			}
		})
	}
	// Every retry notice the real CLI printed is no terminal failure.
	for _, name := range []string{"quota.stderr", "unavailable.stderr", "unreachable.stderr", "dropped.stderr"} {
		b, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "Retrying") && (h.Quota(line) || h.Unavailable(line)) {
				t.Errorf("%s: retry notice matched: %q", name, line)
			}
		}
	}
}

func TestStorage(t *testing.T) {
	s := gemini.Storage()
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"work/chats/session-2026-12-02T01-33-c0a661e0.jsonl", true},
		{"proj-2/chats/session-1796174521204-c0a661e0.jsonl", true},
		{"work/chats/session-2026-12-02T01-33-d0a661e0.jsonl", false},
		{"work/.project_root", false},
		{"work/chats/c0a661e0.jsonl", false},
		{"a/b/chats/session-2026-12-02T01-33-c0a661e0.jsonl", false},
	} {
		if got := s.Match(tc.rel, parent); got != tc.want {
			t.Errorf("Match(%q) = %v", tc.rel, got)
		}
	}
	if s.Match("work/chats/session-2026-12-02T01-33-c0a661e0.jsonl", "c0a661e0") {
		t.Error("Match took a non-UUID id")
	}
	for dir, want := range map[string]string{"/work": "work", "/srv/My Project_2/": "my-project-2", "/": "project", "/x/--": "project"} {
		if got := gemini.Slug(dir); got != want {
			t.Errorf("Slug(%q) = %q, want %q", dir, got, want)
		}
	}
	if got := s.Place("w/chats/session-x-c0a661e0.jsonl", parent, "/home/u/Repo"); got != "repo/chats/session-x-c0a661e0.jsonl" {
		t.Errorf("Place = %q", got)
	}
	// A restored chat file's minute goes one back, so that the file the
	// CLI starts for the loaded session this minute is not the restored
	// one (a resume in the session's first minute found no session).
	for rel, want := range map[string]string{
		"w/chats/session-2026-12-07T04-20-c0a661e0.jsonl": "repo/chats/session-2026-12-07T04-19-c0a661e0.jsonl",
		"w/chats/session-2027-01-01T00-00-c0a661e0.jsonl": "repo/chats/session-2026-12-31T23-59-c0a661e0.jsonl",
		"w/chats/session-2026-13-07T04-20-c0a661e0.jsonl": "repo/chats/session-2026-13-07T04-20-c0a661e0.jsonl",
		"w/logs.json": "repo/logs.json",
	} {
		if got := s.Place(rel, parent, "/home/u/Repo"); got != want {
			t.Errorf("Place(%q) = %q, want %q", rel, got, want)
		}
	}
}

// TestFork runs the fork step with sh on a recorded chat log: the child's
// log is a copy with the child's id, and the parent's log is untouched.
func TestFork(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	home := t.TempDir()
	chats := filepath.Join(home, ".gemini", "tmp", "work", "chats")
	if err := os.MkdirAll(chats, 0o755); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile("testdata/chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(chats, "session-2026-12-02T01-33-c0a661e0.jsonl")
	stub := filepath.Join(chats, "session-2026-12-02T01-44-c0a661e0.jsonl")
	for p, b := range map[string][]byte{src: orig, stub: []byte(`{"sessionId":"` + parent + `"}` + "\n")} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(ctx context.Context, c harness.Command) (harness.RunResult, error) {
		cmd := exec.CommandContext(ctx, c.Path, c.Args...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code, err = ee.ExitCode(), nil
		}
		return harness.RunResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), Status: harness.ExitStatus{Code: code}}, err
	}
	child, err := gemini.Fork(context.Background(), parent, run)
	if err != nil {
		t.Fatal(err)
	}
	if child == parent || !gemini.ValidSessionID(child) {
		t.Fatalf("child = %q", child)
	}
	files, _ := filepath.Glob(filepath.Join(chats, "session-*-"+child[:8]+".jsonl"))
	if len(files) != 1 {
		t.Fatalf("child files %q", files)
	}
	got, _ := os.ReadFile(files[0])
	if bytes.Contains(got, []byte(parent)) || !bytes.Equal(got, bytes.ReplaceAll(orig, []byte(parent), []byte(child))) {
		t.Errorf("child log is not the parent's with the child's id")
	}
	var first map[string]any
	if err := json.Unmarshal(got[:bytes.IndexByte(got, '\n')], &first); err != nil || first["sessionId"] != child {
		t.Errorf("first line %v %v", first, err)
	}
	if after, _ := os.ReadFile(src); !bytes.Equal(after, orig) {
		t.Error("the parent's log changed")
	}
	if _, err := gemini.Fork(context.Background(), "00000000-0000-4000-8000-000000000000", run); err == nil {
		t.Error("fork of a missing session succeeded")
	}
}

func TestCredentialsAndConfiguration(t *testing.T) {
	p, err := gemini.Credentials(harness.Vars{"GEMINI_API_KEY": "k", "OTHER": "x"})
	if err != nil || !cmp.Equal(p.Variables, map[string]string{"GEMINI_API_KEY": "k"}) || p.Need == "" {
		t.Fatalf("plan = %+v, %v", p, err)
	}
	c, err := gemini.Configuration(harness.Vars{"GEMINI_API_KEY": "k", "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Variables["GOOGLE_GEMINI_BASE_URL"] != "http://127.0.0.1:1" || c.Variables["GEMINI_API_KEY"] != "" {
		t.Errorf("variables %v", c.Variables)
	}
	if len(c.Files) != 1 || c.Files[0].Path != ".gemini/settings.json" || c.Files[0].Merge != harness.MergeJSON {
		t.Fatalf("files %+v", c.Files)
	}
	var s struct {
		Security struct{ Auth struct{ SelectedType string } }
		General  struct{ MaxAttempts int }
	}
	if err := json.Unmarshal(c.Files[0].Content, &s); err != nil || s.Security.Auth.SelectedType != "gemini-api-key" || s.General.MaxAttempts != gemini.MaxAttempts {
		t.Errorf("settings %s: %v", c.Files[0].Content, err)
	}
	if _, err := gemini.Configuration(harness.Vars{"GOOGLE_GEMINI_BASE_URL": "127.0.0.1:1"}); err == nil {
		t.Error("a base URL without scheme was accepted")
	}
}

// TestDecodeRoutedTurn: without --model the CLI's router call counts in
// the turn's stats beside the answer's call (two models, one call each).
func TestDecodeRoutedTurn(t *testing.T) {
	var usage *harness.Usage
	for _, ev := range decodeFile(t, "routed.stdout.jsonl") {
		if ev.Type == harness.EventUsage {
			usage = ev.Usage
		}
	}
	want := &harness.Usage{InputTokens: 400, OutputTokens: 60, CacheReadTokens: 2000, Complete: true}
	if diff := cmp.Diff(want, usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// TestNoRelaunch: both presets keep the CLI to one node process a turn
// (docs/presets/gemini.md: a relaunch doubled its start).
func TestNoRelaunch(t *testing.T) {
	for _, h := range []*harness.Harness{gemini.Harness(), gemini.ACP()} {
		if got := h.Variables["GEMINI_CLI_NO_RELAUNCH"]; got != "true" {
			t.Errorf("%s: GEMINI_CLI_NO_RELAUNCH=%q, want true", h.Name, got)
		}
	}
}
