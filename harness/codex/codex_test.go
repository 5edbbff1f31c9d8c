package codex

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
)

const golden = "testdata/golden"

// readLines returns the non-empty lines of a golden file.
func readLines(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(golden, name))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// decodeGolden decodes an exec recording with a decoder for in.
func decodeGolden(t *testing.T, c string, in harness.Input) []harness.Event {
	t.Helper()
	dec := Harness().NewTurnDecoder(in)
	var evs []harness.Event
	for _, l := range readLines(t, c+".stdout.jsonl") {
		evs = append(evs, dec(l)...)
	}
	return evs
}

func only(t *testing.T, evs []harness.Event, typ harness.EventType) []harness.Event {
	t.Helper()
	var out []harness.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func one(t *testing.T, evs []harness.Event, typ harness.EventType) harness.Event {
	t.Helper()
	got := only(t, evs, typ)
	if len(got) != 1 {
		t.Fatalf("want one %s event, got %d in %+v", typ, len(got), evs)
	}
	return got[0]
}

// The fake's default usage per model response: input 100 (20 of them
// cached), output 10 (3 of them reasoning).
var oneResponse = harness.Usage{InputTokens: 80, CacheReadTokens: 20, OutputTokens: 10, Complete: true}

func times(u harness.Usage, n int64) harness.Usage {
	return harness.Usage{InputTokens: u.InputTokens * n, CacheReadTokens: u.CacheReadTokens * n, OutputTokens: u.OutputTokens * n, CacheWriteTokens: u.CacheWriteTokens * n, Complete: u.Complete}
}

func TestDecodeText(t *testing.T) {
	evs := decodeGolden(t, "text", harness.Input{})
	if s := one(t, evs, harness.EventSession); s.Session != "01a228e7-b0fd-7860-88a1-ef8efd8f2894" {
		t.Errorf("session %q", s.Session)
	}
	msg := one(t, evs, harness.EventMessage)
	fin := one(t, evs, harness.EventFinished)
	if msg.Text != "Hello from the fake model." || fin.Text != msg.Text || fin.Stop != "completed" {
		t.Errorf("message %+v finished %+v", msg, fin)
	}
	if fin.Usage == nil || *fin.Usage != oneResponse {
		t.Errorf("finished usage %+v, want %+v", fin.Usage, oneResponse)
	}
	if fin.Details["thread_usage"] != oneResponse {
		t.Errorf("thread usage %v", fin.Details["thread_usage"])
	}
}

// TestDecodeResumedUsage: turn.completed of a resumed thread is the
// thread's total; the finished event then carries it as thread_usage only.
func TestDecodeResumedUsage(t *testing.T) {
	evs := decodeGolden(t, "resume", harness.Input{Conversation: "01a228e2-f48c-7241-85ef-0914c664ddb7"})
	fin := one(t, evs, harness.EventFinished)
	if fin.Usage != nil {
		t.Errorf("a resumed turn's finished event claims usage %+v", fin.Usage)
	}
	if fin.Details["thread_usage"] != times(oneResponse, 2) {
		t.Errorf("thread usage %v", fin.Details["thread_usage"])
	}
	evs = decodeGolden(t, "fork", harness.Input{Conversation: "01a228e2-f7c6-7851-b37d-fbf9f65c0c2f", Fork: true})
	if fin := one(t, evs, harness.EventFinished); fin.Usage != nil || fin.Details["thread_usage"] != times(oneResponse, 2) {
		t.Errorf("fork finished %+v", fin)
	}
}

func TestDecodeTools(t *testing.T) {
	for _, c := range []struct {
		name, tool, input, output string
		isErr                     bool
		code                      int64
	}{
		{"tool", "command_execution", `{"command":"/bin/bash -lc 'echo hi; echo bye >&2'"}`, "hi\nbye\n", false, 0},
		{"tool-fail", "command_execution", `{"command":"/bin/bash -lc 'echo out; echo err >&2; exit 3'"}`, "out\nerr\n", true, 3},
		{"patch", "file_change", `{"changes":[{"path":"/tmp/outpost-golden/codex/patch/work/hello.txt","kind":"add"}]}`, "add /tmp/outpost-golden/codex/patch/work/hello.txt", false, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := decodeGolden(t, c.name, harness.Input{})
			call, res := one(t, evs, harness.EventToolCall), one(t, evs, harness.EventToolResult)
			if call.Tool.Name != c.tool || string(call.Tool.Input) != c.input {
				t.Errorf("call %s %s", call.Tool.Name, call.Tool.Input)
			}
			if res.Tool.ID != call.Tool.ID || !strings.HasSuffix(call.Tool.ID, ":item_0") || res.Tool.Output != c.output || res.Tool.Error != c.isErr {
				t.Errorf("call id %q result %+v", call.Tool.ID, res.Tool)
			}
			if c.code >= 0 && res.Details["exit_code"] != c.code {
				t.Errorf("exit code %v", res.Details["exit_code"])
			}
			if fin := one(t, evs, harness.EventFinished); fin.Usage == nil || *fin.Usage != times(oneResponse, 2) {
				t.Errorf("finished %+v", fin)
			}
		})
	}
}

// TestItemIDsPerTurn: exec's item ids restart at item_0 in every process;
// events of two turns of one thread never share an id.
func TestItemIDsPerTurn(t *testing.T) {
	a := one(t, decodeGolden(t, "resume-turn1", harness.Input{}), harness.EventMessage)
	b := one(t, decodeGolden(t, "resume", harness.Input{Conversation: "01a228e2-f48c-7241-85ef-0914c664ddb7"}), harness.EventMessage)
	if a.ID == b.ID || !strings.HasSuffix(a.ID, ":item_0") || !strings.HasSuffix(b.ID, ":item_0") {
		t.Errorf("ids %q and %q", a.ID, b.ID)
	}
}

func TestDecodeFailures(t *testing.T) {
	for _, c := range []struct {
		name, kind       string
		quota, down      bool
		retries          int
		textPrefix       string
		quotaKind        string
		retryDetailsWant map[string]any
	}{
		{"usage-limit", "rate_limit", true, false, 0, "You’ve hit your usage limit", QuotaUsageLimit, nil},
		{"insufficient-quota", "rate_limit", true, false, 0, "Quota exceeded.", QuotaInsufficientQuota, nil},
		{"rate-limit", "rate_limit", true, false, 0, "exceeded retry limit, last status: 429", QuotaRateLimit, nil},
		{"rate-limit-retry-after", "rate_limit", true, false, 1, "exceeded retry limit, last status: 429", QuotaRateLimit, map[string]any{"attempt": 1, "max": 1}},
		{"http-500", "unavailable", false, true, 1, "We’re currently experiencing high demand", "", nil},
		{"http-503", "unavailable", false, true, 1, "unexpected status 503 Service Unavailable", "", nil},
		{"http-401", "auth", false, false, 1, "unexpected status 401 Unauthorized", "", nil},
		{"dropped-stream", "unavailable", false, true, 1, "stream disconnected before completion: Transport error", "", nil},
		{"truncated-stream", "unavailable", false, true, 1, "stream disconnected before completion: stream closed", "", nil},
		{"response-failed", "unavailable", false, true, 1, "stream disconnected before completion: fake failure", "", nil},
		{"no-response", "unavailable", false, true, 1, "stream disconnected before completion: error sending request", "", nil},
		{"idle-timeout", "unavailable", false, true, 1, "stream disconnected before completion: idle timeout", "", nil},
		{"context-window", "context_window", false, false, 0, "Codex ran out of room", "", nil},
		{"missing-key", "auth", false, false, 0, "Missing environment variable", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := decodeGolden(t, c.name, harness.Input{})
			f := one(t, evs, harness.EventFailure) // the error and turn.failed are one failure
			if f.Kind != c.kind || !strings.HasPrefix(f.Text, c.textPrefix) {
				t.Errorf("failure %s %q", f.Kind, f.Text)
			}
			if Quota(f.Text) != c.quota || Unavailable(f.Text) != c.down {
				t.Errorf("Quota %v Unavailable %v for %q", Quota(f.Text), Unavailable(f.Text), f.Text)
			}
			if c.quota && QuotaDetails(f.Text)["quota"] != c.quotaKind {
				t.Errorf("details %v", QuotaDetails(f.Text))
			}
			retries := only(t, evs, harness.EventNotice)
			if len(retries) != c.retries {
				t.Fatalf("%d notices, want %d", len(retries), c.retries)
			}
			for _, r := range retries {
				if r.Kind != "retry" || Quota(r.Text) || Unavailable(r.Text) {
					t.Errorf("retry notice %+v classified", r)
				}
				if c.retryDetailsWant != nil && !cmp.Equal(r.Details, c.retryDetailsWant) {
					t.Errorf("retry details %v", r.Details)
				}
			}
			if len(only(t, evs, harness.EventFinished)) != 0 {
				t.Error("a failed turn finished")
			}
		})
	}
	// A refused connection: only retry notices, forever.
	evs := decodeGolden(t, "conn-refused", harness.Input{})
	for _, n := range only(t, evs, harness.EventNotice) {
		if n.Details["waiting_for_network"] != true || Unavailable(n.Text) || Quota(n.Text) {
			t.Errorf("notice %+v", n)
		}
	}
}

func TestBudget(t *testing.T) {
	evs := decodeGolden(t, "tool", harness.Input{Options: map[string]string{OptionMaxModelRequests: "1"}})
	var limit *harness.Event
	for i, e := range evs {
		if e.Type == harness.EventFailure && e.Kind == harness.KindLimit {
			if evs[i-1].Type != harness.EventToolResult {
				t.Errorf("the limit comes after %s, want right after the tool result", evs[i-1].Type)
			}
			limit = &evs[i]
		}
	}
	if limit == nil || limit.Details["limit"] != OptionMaxModelRequests || limit.Details["tool_calls"] != 1 {
		t.Fatalf("limit %+v in %+v", limit, evs)
	}
	if Quota(limit.Text) || Unavailable(limit.Text) {
		t.Error("the limit text is classified")
	}
	evs = decodeGolden(t, "tool", harness.Input{Options: map[string]string{OptionMaxModelRequests: "2"}})
	for _, e := range evs {
		if e.Kind == harness.KindLimit {
			t.Error("a budget of 2 requests stopped a 2-request turn")
		}
	}
}

func TestQuotaDetailsResetsIn(t *testing.T) {
	d := QuotaDetails("You've hit your usage limit. Upgrade to Pro or try again in 2 hours 5 minutes.")
	if d["quota"] != QuotaUsageLimit || d["resets_at"] == nil {
		t.Errorf("%v", d)
	}
	if QuotaDetails("Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)") != nil {
		t.Error("details for a retry notice")
	}
}

func TestRequest(t *testing.T) {
	const id = "01a228e2-f48c-7241-85ef-0914c664ddb7"
	home := "/home/agent"
	for _, c := range []struct {
		name string
		in   harness.Input
		want []string
	}{
		{"new", harness.Input{Prompt: "hi", Home: home}, []string{"exec", "--json", "--skip-git-repo-check", "--", "hi"}},
		{"model and sandbox", harness.Input{Prompt: "hi", Model: "gpt-5.5", Options: map[string]string{OptionSandbox: "workspace-write"}},
			[]string{"exec", "--json", "--skip-git-repo-check", "-m", "gpt-5.5", "-s", "workspace-write", "--", "hi"}},
		{"resume", harness.Input{Prompt: "-x", Conversation: id, Options: map[string]string{OptionSandbox: "workspace-write"}},
			[]string{"exec", "resume", "--json", "--skip-git-repo-check", "-c", `sandbox_mode="workspace-write"`, "--", id, "-x"}},
		{"fork", harness.Input{Prompt: "p", Conversation: id, Fork: true}, []string{"exec", "fork", "--json", "--skip-git-repo-check", "--", id, "p"}},
		{"retries", harness.Input{Prompt: "p", Options: map[string]string{OptionRequestMaxRetries: "0", OptionStreamMaxRetries: "0", OptionStreamIdleTimeout: "1s", OptionReasoningEffort: "low"}},
			[]string{"exec", "--json", "--skip-git-repo-check", "-c", `model_reasoning_effort="low"`, "-c", `model_providers.outpost.name="outpost"`,
				"-c", "model_providers.outpost.request_max_retries=0", "-c", "model_providers.outpost.stream_idle_timeout_ms=1000", "-c", "model_providers.outpost.stream_max_retries=0", "--", "p"}},
		{"retries of a provider from the extra args", harness.Input{Prompt: "p", Options: map[string]string{OptionStreamMaxRetries: "1"}, ExtraArgs: []string{"-c", `model_provider="fake"`}},
			[]string{"exec", "--json", "--skip-git-repo-check", "-c", "model_providers.fake.stream_max_retries=1", "-c", `model_provider="fake"`, "--", "p"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd, err := Request(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, cmd.Args); diff != "" || cmd.Path != "codex" || cmd.KeepStdin || cmd.Stdin != nil {
				t.Errorf("path %q stdin %q args (-want +got):\n%s", cmd.Path, cmd.Stdin, diff)
			}
			if c.in.Home != "" && cmd.Env["CODEX_HOME"] != "/home/agent/.codex" {
				t.Errorf("env %v", cmd.Env)
			}
		})
	}
	big := strings.Repeat("x", MaxArgPrompt+1)
	for _, p := range []string{big, "-"} {
		cmd, err := Request(harness.Input{Prompt: p})
		if err != nil || cmd.Args[len(cmd.Args)-1] != "-" || string(cmd.Stdin) != p {
			t.Errorf("prompt of %d bytes: %v %q", len(p), err, cmd.Args[len(cmd.Args)-1])
		}
	}
	for name, in := range map[string]harness.Input{
		"unknown option":   {Prompt: "p", Options: map[string]string{"nope": "1"}},
		"bad sandbox":      {Prompt: "p", Options: map[string]string{OptionSandbox: "yolo"}},
		"bad retries":      {Prompt: "p", Options: map[string]string{OptionStreamMaxRetries: "-1"}},
		"bad timeout":      {Prompt: "p", Options: map[string]string{OptionStreamIdleTimeout: "forever"}},
		"bad budget":       {Prompt: "p", Options: map[string]string{OptionMaxModelRequests: "0"}},
		"bad provider":     {Prompt: "p", Options: map[string]string{OptionProvider: "a.b"}},
		"not a thread id":  {Prompt: "p", Conversation: "--last"},
		"fork without id":  {Prompt: "p", Fork: true},
		"--last":           {Prompt: "p", ExtraArgs: []string{"--last"}},
		"--ephemeral":      {Prompt: "p", ExtraArgs: []string{"--ephemeral"}},
		"-s on resume":     {Prompt: "p", Conversation: "01a228e2-f48c-7241-85ef-0914c664ddb7", ExtraArgs: []string{"-s", "read-only"}},
		"double dash":      {Prompt: "p", ExtraArgs: []string{"--"}},
		"model with space": {Prompt: "p", Model: "a b"},
	} {
		if _, err := Request(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCredentials(t *testing.T) {
	p, err := Credentials(harness.Vars{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})
	var mv *harness.MissingVariableError
	if !errors.As(err, &mv) || mv.Names[0] != APIKeyVariable {
		t.Fatalf("base URL without key: %v", err)
	}
	p, err = Credentials(harness.Vars{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "CODEX_API_KEY": "sk-c"})
	if err != nil || !cmp.Equal(p.Variables, map[string]string{"OPENAI_API_KEY": "sk-c", "CODEX_API_KEY": "sk-c"}) {
		t.Errorf("base URL with CODEX_API_KEY alone: %+v %v", p, err)
	}
	p, err = Credentials(harness.Vars{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "sk-a", "HOME": "/root"})
	if err != nil || !cmp.Equal(p.Variables, map[string]string{"OPENAI_API_KEY": "sk-a"}) || len(p.HostFiles) > 0 {
		t.Errorf("base URL: %+v %v", p, err)
	}
	p, _ = Credentials(harness.Vars{"OPENAI_API_KEY": "sk-a"})
	if !cmp.Equal(p.Variables, map[string]string{"OPENAI_API_KEY": "sk-a", "CODEX_API_KEY": "sk-a"}) {
		t.Errorf("OPENAI_API_KEY alone: %v", p.Variables)
	}
	p, _ = Credentials(harness.Vars{"OPENAI_API_KEY": "sk-a", "CODEX_API_KEY": "sk-c"})
	if !cmp.Equal(p.Variables, map[string]string{"OPENAI_API_KEY": "sk-a", "CODEX_API_KEY": "sk-c"}) {
		t.Errorf("both keys: %v", p.Variables)
	}
	p, _ = Credentials(harness.Vars{"HOME": "/home/u"})
	want := []harness.HostFile{{Source: "/home/u/.codex/auth.json", Target: ".codex/auth.json", Mode: 0o600, Optional: true, Exclusive: true}}
	if len(p.Variables) != 0 || !cmp.Equal(p.HostFiles, want) {
		t.Errorf("ChatGPT login: %+v", p)
	}
	p, _ = Credentials(harness.Vars{"HOME": "/home/u", "CODEX_HOME": "/srv/codex"})
	if p.HostFiles[0].Source != "/srv/codex/auth.json" {
		t.Errorf("CODEX_HOME: %+v", p.HostFiles)
	}
	if p, _ = Credentials(harness.Vars{"HOME": "relative"}); len(p.HostFiles) != 0 {
		t.Errorf("relative HOME: %+v", p.HostFiles)
	}
}

func TestConfiguration(t *testing.T) {
	c, err := Configuration(harness.Vars{})
	if err != nil || len(c.Files) != 1 || c.Files[0].Path != ".codex/config.toml" || c.Files[0].Merge != harness.MergeTOML {
		t.Fatalf("%+v %v", c, err)
	}
	plain := string(c.Files[0].Content)
	for _, want := range []string{"check_for_update_on_startup = false\n", "[analytics]\nenabled = false\n"} {
		if !strings.Contains(plain, want) {
			t.Errorf("missing %q in\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "model_provider") {
		t.Errorf("a provider without OPENAI_BASE_URL:\n%s", plain)
	}
	c, err = Configuration(harness.Vars{"OPENAI_BASE_URL": `http://127.0.0.1:9/v1/`, "OPENAI_MODEL": `m"1`})
	if err != nil {
		t.Fatal(err)
	}
	got := string(c.Files[0].Content)
	for _, want := range []string{`model_provider = "outpost"`, `model = "m\"1"`, "[model_providers.outpost]\n", `base_url = "http://127.0.0.1:9/v1"`, `env_key = "OPENAI_API_KEY"`, `wire_api = "responses"`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// Top-level keys come before the first table.
	if strings.Index(got, "model_provider =") > strings.Index(got, "[") {
		t.Errorf("top-level key after a table:\n%s", got)
	}
	for _, bad := range []string{"127.0.0.1:9", "ftp://x/v1", "http://"} {
		if _, err := Configuration(harness.Vars{"OPENAI_BASE_URL": bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// transcript builds a Transcript from golden rollouts.
func transcript(t *testing.T, native string, files map[string]string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for id, name := range files {
		b, err := os.ReadFile(filepath.Join(golden, name))
		if err != nil {
			t.Fatal(err)
		}
		out[SessionsRoot+"/2026/11/29/rollout-2026-11-29T19-58-12-"+id+".jsonl"] = b
	}
	return out
}

// firstLines keeps the first n lines of a rollout.
func firstLines(b []byte, n int) []byte {
	ls := bytes.SplitAfter(b, []byte("\n"))
	return bytes.Join(ls[:min(n, len(ls))], nil)
}

func TestStorageAndUsage(t *testing.T) {
	const (
		text   = "01a228e7-b0fd-7860-88a1-ef8efd8f2894"
		resume = "01a228e2-f48c-7241-85ef-0914c664ddb7"
		parent = "01a228e2-f7c6-7851-b37d-fbf9f65c0c2f"
		fork   = "01a228e2-f964-7463-b866-ade12c727c65"
	)
	st := Storage()
	if !st.Match("2026/11/29/rollout-2026-11-29T20-03-22-"+text+".jsonl", text) || st.Match("2026/11/29/rollout-x-"+text+".jsonl", resume) ||
		st.Match("2026/11/29/"+text+".jsonl", text) || st.Match("rollout-x-.jsonl", "") {
		t.Error("Match")
	}
	forkRollout, _ := os.ReadFile(filepath.Join(golden, "fork.rollout.jsonl"))
	if got := st.Ancestors("2026/11/29/rollout-x-"+fork+".jsonl", forkRollout); !cmp.Equal(got, []string{parent}) {
		t.Errorf("Ancestors = %v", got)
	}
	textRollout, _ := os.ReadFile(filepath.Join(golden, "text.rollout.jsonl"))
	if got := st.Ancestors("2026/11/29/rollout-x-"+text+".jsonl", textRollout); got != nil {
		t.Errorf("Ancestors of a plain thread = %v", got)
	}

	resumeFiles := transcript(t, resume, map[string]string{resume: "resume.rollout.jsonl"})
	var resumeBefore = map[string][]byte{}
	for p, b := range resumeFiles {
		resumeBefore[p] = firstLines(b, 14) // the rollout after the first turn
	}
	parentFiles := transcript(t, parent, map[string]string{parent: "fork-parent.rollout.jsonl"})
	forkFiles := transcript(t, fork, map[string]string{parent: "fork-parent.rollout.jsonl", fork: "fork.rollout.jsonl"})
	forkResumeFiles := transcript(t, fork, map[string]string{parent: "fork-parent.rollout.jsonl", fork: "fork-resume.rollout.jsonl"})
	forkNoTurn := transcript(t, fork, map[string]string{parent: "fork-parent.rollout.jsonl", fork: "fork.rollout.jsonl"})
	for p, b := range forkNoTurn {
		if strings.Contains(p, fork) {
			forkNoTurn[p] = firstLines(b, 1)
		}
	}
	for _, c := range []struct {
		name           string
		t              harness.Transcript
		turn, thread   harness.Usage
		transcriptNone bool
	}{
		{"new thread", harness.Transcript{Native: text, Files: transcript(t, text, map[string]string{text: "text.rollout.jsonl"})}, oneResponse, oneResponse, false},
		{"resumed", harness.Transcript{Native: resume, Files: resumeFiles, Before: resumeBefore}, oneResponse, times(oneResponse, 2), false},
		{"fork", harness.Transcript{Native: fork, Files: forkFiles, Before: parentFiles}, oneResponse, times(oneResponse, 2), false},
		{"fork resumed", harness.Transcript{Native: fork, Files: forkResumeFiles, Before: forkFiles}, oneResponse, times(oneResponse, 3), false},
		{"fork whose turn made no request", harness.Transcript{Native: fork, Files: forkNoTurn, Before: parentFiles}, harness.Usage{Complete: true}, oneResponse, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if u := TranscriptUsage(c.t); u == nil || *u != c.turn {
				t.Errorf("TranscriptUsage = %+v, want %+v", u, c.turn)
			}
			if u := ThreadUsage(c.t); u == nil || *u != c.thread {
				t.Errorf("ThreadUsage = %+v, want %+v", u, c.thread)
			}
		})
	}
	if TranscriptUsage(harness.Transcript{Native: text}) != nil || ThreadUsage(harness.Transcript{Native: text, Files: parentFiles}) != nil {
		t.Error("usage without the rollout")
	}
}

// TestTextCodexHome: the recorded CODEX_HOME after a turn has the rollout
// where Storage looks for it.
func TestTextCodexHome(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(golden, "text.codex-home.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, l := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(strings.TrimSpace(l), "sessions/"); ok && matchRollout(rel, "01a228e7-b0fd-7860-88a1-ef8efd8f2894") {
			found = true
		}
	}
	if !found {
		t.Errorf("no rollout of the text thread in\n%s", b)
	}
}

func TestEventsSerialize(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(golden, "*.stdout.jsonl"))
	for _, n := range names {
		for _, ev := range decodeGolden(t, strings.TrimSuffix(filepath.Base(n), ".stdout.jsonl"), harness.Input{}) {
			if _, err := json.Marshal(ev); err != nil {
				t.Errorf("%s: %v", n, err)
			}
			if ev.Type == harness.EventToolCall && !json.Valid(ev.Tool.Input) {
				t.Errorf("%s: tool input %q", n, ev.Tool.Input)
			}
		}
	}
	if !slices.Contains(Options, OptionMaxModelRequests) {
		t.Error("Options")
	}
}

// TestHistory reads a resumed thread's exchange from its recorded rollout:
// the user's two prompts (not the context Codex injects) and the two
// answers, in order; a function call and its output as a tool call and
// its result.
func TestHistory(t *testing.T) {
	const resume = "01a228e2-f48c-7241-85ef-0914c664ddb7"
	got := History(harness.Transcript{Native: resume, Files: transcript(t, resume, map[string]string{resume: "resume.rollout.jsonl"})})
	want := []harness.Event{
		{Type: harness.EventMessage, Kind: harness.KindUser, Text: "First turn FAKE_ECHO"},
		{Type: harness.EventMessage, Text: "ECHO nmsg=4 last_user=First turn FAKE_ECHO"},
		{Type: harness.EventMessage, Kind: harness.KindUser, Text: "Second turn FAKE_ECHO"},
		{Type: harness.EventMessage, Text: "ECHO nmsg=6 last_user=Second turn FAKE_ECHO"},
	}
	if !cmp.Equal(got, want) {
		t.Errorf("History:\n%s", cmp.Diff(want, got))
	}
	call := []byte(`{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"c1"}}` + "\n" +
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":{"output":"a.txt\n"}}}` + "\n")
	got = History(harness.Transcript{Native: resume, Files: map[string][]byte{SessionsRoot + "/2026/11/29/rollout-x-" + resume + ".jsonl": call}})
	if len(got) != 2 || got[0].Tool == nil || got[0].Tool.Name != "shell" || string(got[0].Tool.Input) != `{"command":["ls"]}` || got[1].Tool == nil || got[1].Tool.Output != "a.txt\n" {
		t.Errorf("History of a function call: %+v", got)
	}
	if History(harness.Transcript{Native: resume}) != nil {
		t.Error("History without the rollout")
	}
}
