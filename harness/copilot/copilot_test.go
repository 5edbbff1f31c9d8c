package copilot_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/harness/harnesstest"
)

func TestHarness(t *testing.T) {
	h := copilot.Harness()
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if h.Forks() || !h.Resumes() || !h.Captures() || h.Storage == nil {
		t.Errorf("Forkable=%v Resumable=%v Capture=%v: want not forkable, resumable, captured", h.Forks(), h.Resumes(), h.Captures())
	}
	if h.Usage != harness.UsageSession || !h.RequiresFinishedEvent || h.Bootstrap != "copilot" {
		t.Errorf("Usage=%q RequiresFinishedEvent=%v Bootstrap=%q", h.Usage, h.RequiresFinishedEvent, h.Bootstrap)
	}
	if h.Variables["COPILOT_AUTO_UPDATE"] != "false" {
		t.Errorf("auto-update is not turned off: %v", h.Variables)
	}
}

func TestRequestNew(t *testing.T) {
	cmd, err := copilot.Request(harness.Input{Prompt: "-starts with a dash", Model: "gpt-4.1", Workdir: "/w", Home: "/home/u"})
	if err != nil {
		t.Fatal(err)
	}
	if !copilot.ValidSessionID(cmd.Session) {
		t.Fatalf("Session = %q, want a minted UUID", cmd.Session)
	}
	want := []string{"--prompt=-starts with a dash", "--output-format", "json", "--no-auto-update", "--no-ask-user",
		"--session-id=" + cmd.Session, "--model=gpt-4.1", "--allow-all-tools"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if cmd.Path != "copilot" || cmd.Env["COPILOT_HOME"] != "/home/u/.copilot" || cmd.Stdin != nil || cmd.KeepStdin {
		t.Errorf("cmd = %+v", cmd)
	}
	again, _ := copilot.Request(harness.Input{Prompt: "x"})
	if again.Session == cmd.Session {
		t.Error("two new sessions got the same id")
	}
	if again.Env != nil {
		t.Errorf("without a home, no COPILOT_HOME: %v", again.Env)
	}
}

func TestRequestResumeAndOptions(t *testing.T) {
	id := "0a0a0a0a-0000-4000-8000-000000000001"
	cmd, err := copilot.Request(harness.Input{
		Prompt: "go on", Conversation: id,
		Options:   map[string]string{"permissions": "all", "reasoning-effort": "high", "max-ai-credits": "2.5"},
		ExtraArgs: []string{"--log-level", "debug"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--prompt=go on", "--output-format", "json", "--no-auto-update", "--no-ask-user", "--resume=" + id,
		"--max-ai-credits=2.5", "--reasoning-effort=high", "--allow-all", "--log-level", "debug"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if cmd.Session != id {
		t.Errorf("Session = %q, want %q", cmd.Session, id)
	}
}

func TestRequestBigPrompt(t *testing.T) {
	p := strings.Repeat("x", copilot.MaxArgPrompt+1)
	cmd, err := copilot.Request(harness.Input{Prompt: p})
	if err != nil {
		t.Fatal(err)
	}
	if string(cmd.Stdin) != p || slices.ContainsFunc(cmd.Args, func(a string) bool { return strings.HasPrefix(a, "--prompt") }) {
		t.Errorf("a long prompt must go through stdin, args %q", cmd.Args)
	}
}

func TestRequestErrors(t *testing.T) {
	id := "0a0a0a0a-0000-4000-8000-000000000001"
	for name, in := range map[string]harness.Input{
		"fork":           {Prompt: "x", Conversation: id, Fork: true},
		"bad id":         {Prompt: "x", Conversation: "latest"},
		"prefix id":      {Prompt: "x", Conversation: "0a0a0a0"},
		"model":          {Prompt: "x", Model: "--yolo"},
		"nul":            {Prompt: "a\x00b"},
		"option":         {Prompt: "x", Options: map[string]string{"nope": "1"}},
		"permissions":    {Prompt: "x", Options: map[string]string{"permissions": "none"}},
		"effort":         {Prompt: "x", Options: map[string]string{"reasoning-effort": "huge"}},
		"credits":        {Prompt: "x", Options: map[string]string{"max-ai-credits": "-1"}},
		"credits nan":    {Prompt: "x", Options: map[string]string{"max-ai-credits": "NaN"}},
		"extra resume":   {Prompt: "x", ExtraArgs: []string{"--resume=abc"}},
		"extra continue": {Prompt: "x", ExtraArgs: []string{"--continue"}},
		"extra prompt":   {Prompt: "x", ExtraArgs: []string{"-p", "y"}},
		"extra format":   {Prompt: "x", ExtraArgs: []string{"--output-format=text"}},
		"extra silent":   {Prompt: "x", ExtraArgs: []string{"-s"}},
		"extra model":    {Prompt: "x", ExtraArgs: []string{"--model", "m"}},
		"extra acp":      {Prompt: "x", ExtraArgs: []string{"--acp"}},
	} {
		if _, err := copilot.Request(in); err == nil {
			t.Errorf("%s: Request(%+v) succeeded", name, in)
		}
	}
}

func TestCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars harness.Vars
		want map[string]string
	}{
		{"none", harness.Vars{}, nil},
		{"precedence", harness.Vars{"GH_TOKEN": "gho_b", "GITHUB_TOKEN": "github_pat_c", "COPILOT_GITHUB_TOKEN": "github_pat_a"}, map[string]string{"COPILOT_GITHUB_TOKEN": "github_pat_a"}},
		{"empty is unset", harness.Vars{"COPILOT_GITHUB_TOKEN": "", "GITHUB_TOKEN": "gho_c"}, map[string]string{"GITHUB_TOKEN": "gho_c"}},
		{"classic skipped", harness.Vars{"GH_TOKEN": "ghp_classic", "GITHUB_TOKEN": "gho_c"}, map[string]string{"GITHUB_TOKEN": "gho_c"}},
		{"classic with byok", harness.Vars{"GH_TOKEN": "ghp_classic", "COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1", "COPILOT_PROVIDER_API_KEY": "k"}, map[string]string{"COPILOT_PROVIDER_API_KEY": "k"}},
		{"byok secrets", harness.Vars{"COPILOT_PROVIDER_BEARER_TOKEN": "b", "COPILOT_PROVIDER_HEADERS": "X-Key: v", "COPILOT_PROVIDER_API_KEY_COMMAND": "cat key", "OPENAI_API_KEY": "no"},
			map[string]string{"COPILOT_PROVIDER_BEARER_TOKEN": "b", "COPILOT_PROVIDER_HEADERS": "X-Key: v", "COPILOT_PROVIDER_API_KEY_COMMAND": "cat key"}},
	} {
		p, err := copilot.Credentials(tc.vars)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, p.Variables); diff != "" {
			t.Errorf("%s: variables (-want +got):\n%s", tc.name, diff)
		}
		if len(p.HostFiles)+len(p.Files)+len(p.Login) > 0 {
			t.Errorf("%s: unexpected files or logins: %+v", tc.name, p)
		}
	}
	secret := "ghp_0123456789abcdefSECRET"
	_, err := copilot.Credentials(harness.Vars{"GH_TOKEN": secret})
	if !errors.Is(err, copilot.ErrClassicToken) {
		t.Fatalf("a classic token alone: err = %v, want ErrClassicToken", err)
	}
	if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "GH_TOKEN") {
		t.Errorf("the error must name the variable and never quote the token: %v", err)
	}
}

// With neither a GitHub token nor a BYOK provider the plan needs a
// credential (Plan.Need), naming the variables; a token, or a BYOK base
// URL (a provider may take no key), needs nothing more.
func TestCredentialsNeed(t *testing.T) {
	p, err := copilot.Credentials(harness.Vars{"HOME": "/home/u"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL"} {
		if !strings.Contains(p.Need, name) {
			t.Errorf("need %q does not name %s", p.Need, name)
		}
	}
	for _, vars := range []harness.Vars{
		{"GH_TOKEN": "gho_x"},
		{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1"},
		{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1", "GH_TOKEN": "ghp_classic"},
	} {
		p, err := copilot.Credentials(vars)
		if err != nil || p.Need != "" {
			t.Errorf("%v: need %q, err %v", vars, p.Need, err)
		}
	}
}

func TestConfiguration(t *testing.T) {
	c, err := copilot.Configuration(harness.Vars{
		"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9/v1", "COPILOT_OFFLINE": "true", "COPILOT_MODEL": "gpt-4.1",
		"COPILOT_PKG_CACHE_HOME": "/cache", "COPILOT_PROVIDER_API_KEY": "secret", "HOME": "/root", "XDG_CACHE_HOME": "/x",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9/v1", "COPILOT_OFFLINE": "true", "COPILOT_MODEL": "gpt-4.1", "COPILOT_PKG_CACHE_HOME": "/cache"}
	if diff := cmp.Diff(want, c.Variables); diff != "" {
		t.Errorf("variables (-want +got):\n%s", diff)
	}
	if _, err := copilot.Configuration(harness.Vars{"COPILOT_PROVIDER_BASE_URL": "ftp://user:pw@host"}); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("a bad URL: err = %v, want an error that does not quote it", err)
	}
}

// decodeCase decodes a golden case with a fresh decoder.
func decodeCase(t *testing.T, name string) []harness.Event {
	t.Helper()
	cases, err := harnesstest.Cases(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Name != name {
			continue
		}
		dec := copilot.NewDecoder()
		var evs []harness.Event
		for _, l := range c.Lines {
			evs = append(evs, dec.Decode(l)...)
		}
		return evs
	}
	t.Fatalf("no golden case %s", name)
	return nil
}

func only(evs []harness.Event, typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestDecodeText(t *testing.T) {
	evs := decodeCase(t, "text")
	var deltas string
	for _, ev := range evs {
		if ev.Type == harness.EventMessage && ev.Delta {
			deltas += ev.Text
		}
	}
	fin := only(evs, harness.EventFinished)
	if len(fin) != 1 || fin[0].Text != "Hello from the fake model." || fin[0].Stop != "end_turn" || deltas != fin[0].Text {
		t.Fatalf("finished %+v, deltas %q", fin, deltas)
	}
	if fin[0].Details["session_id"] != "0a0a0a0a-0000-4000-8000-000000000001" || fin[0].Details["exit_code"] != int64(0) {
		t.Errorf("finished details %v", fin[0].Details)
	}
}

func TestDecodeTool(t *testing.T) {
	evs := decodeCase(t, "tool")
	calls, results := only(evs, harness.EventToolCall), only(evs, harness.EventToolResult)
	if len(calls) != 1 || len(results) != 1 {
		t.Fatalf("calls %d results %d, want 1 and 1", len(calls), len(results))
	}
	c, r := calls[0].Tool, results[0].Tool
	if c.Name != "bash" || c.ID != "call_fake000002" || !strings.Contains(string(c.Input), `"command":"echo hi; echo bye \u003e\u00262"`) && !strings.Contains(string(c.Input), `echo hi; echo bye >&2`) {
		t.Errorf("tool call %+v (input %s)", c, c.Input)
	}
	if r.ID != c.ID || r.Name != "bash" || r.Error || !strings.Contains(r.Output, "hi\nbye\n") || results[0].Details["exit_code"] != int64(0) {
		t.Errorf("tool result %+v %v", r, results[0].Details)
	}
	fin := only(evs, harness.EventFinished)
	if len(fin) != 1 || !strings.HasPrefix(fin[0].Text, "Tool output was: hi") {
		t.Errorf("finished %+v", fin)
	}
}

// TestClassify checks the verdict of every recorded failure: the failure
// event, Quota and Unavailable on its text, and the retry notices.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name        string
		kind        string
		quota       bool
		unavailable bool
		resetsIn    time.Duration // from the session.error's timestamp; 0 = no resets_at
	}{
		{"rate-limit", "rate_limit", true, false, time.Second},
		{"rate-limit-retry-after", "rate_limit", true, false, time.Second}, // session.error at 19:52:34.305Z
		{"insufficient-quota", "rate_limit", true, false, 0},
		{"http-500", "query", false, true, 0},
		{"http-503", "query", false, true, 0},
		{"conn-refused", "query", false, true, 0},
		{"dropped-stream", "query", false, true, 0},
		{"http-401", "authentication", false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := decodeCase(t, tc.name)
			fails := only(evs, harness.EventFailure)
			if len(fails) != 1 {
				t.Fatalf("%d failure events, want 1", len(fails))
			}
			f := fails[0]
			if f.Kind != tc.kind || f.Details["error_type"] != tc.kind {
				t.Errorf("kind %q details %v, want %s", f.Kind, f.Details, tc.kind)
			}
			if got := copilot.Quota(f.Text); got != tc.quota {
				t.Errorf("Quota(%q) = %v", f.Text, got)
			}
			if got := copilot.Unavailable(f.Text); got != tc.unavailable {
				t.Errorf("Unavailable(%q) = %v", f.Text, got)
			}
			r, _ := f.Details["resets_at"].(string)
			if (tc.resetsIn != 0) != (r != "") {
				t.Errorf("resets_at = %q", r)
			}
			if r != "" {
				if _, err := time.Parse(time.RFC3339, r); err != nil {
					t.Errorf("resets_at %q: %v", r, err)
				}
			}
			if want := map[string]string{"rate-limit": "rate", "rate-limit-retry-after": "rate", "insufficient-quota": "quota"}[tc.name]; f.Details["limit"] != nil || want != "" {
				if f.Details["limit"] != want {
					t.Errorf("details.limit = %v, want %q", f.Details["limit"], want)
				}
			}
			if tc.name == "rate-limit-retry-after" && r != "2026-11-29T19:52:36Z" {
				t.Errorf("resets_at = %q, want 34.305 + 1s rounded up", r)
			}
			fin := only(evs, harness.EventFinished)
			if len(fin) != 1 || fin[0].Stop != "error" || fin[0].Text != "" {
				t.Errorf("finished %+v", fin)
			}
			for i, n := range only(evs, harness.EventNotice) {
				if n.Kind != "retry" {
					continue
				}
				if copilot.Quota(n.Text) || copilot.Unavailable(n.Text) {
					t.Errorf("a retry notice is classified as terminal: %q", n.Text)
				}
				_ = i
			}
		})
	}
}

func TestRetryNotices(t *testing.T) {
	evs := decodeCase(t, "rate-limit-retry-after")
	var attempts []any
	for _, n := range only(evs, harness.EventNotice) {
		if n.Kind == "retry" {
			attempts = append(attempts, n.Details["attempt"])
			if n.Details["status_code"] != int64(429) || n.Details["reason"] != "rate_limit" || !strings.Contains(n.Details["error"].(string), "Rate limit reached") {
				t.Errorf("retry details %v", n.Details)
			}
		}
	}
	if diff := cmp.Diff([]any{1, 2, 3, 4, 5}, attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
}

// TestRetryDiscardsDeltas: each attempt of the dropped stream printed a
// delta that never completed; the retry (or the final failure) lists it.
func TestRetryDiscardsDeltas(t *testing.T) {
	evs := decodeCase(t, "dropped-stream")
	var open []string
	for _, ev := range evs {
		switch {
		case ev.Type == harness.EventMessage && ev.Delta:
			open = append(open, ev.ID)
		case ev.Type == harness.EventNotice && ev.Kind == "retry", ev.Type == harness.EventFailure:
			got, _ := ev.Details["discard"].([]string)
			if diff := cmp.Diff(open, got); diff != "" {
				t.Errorf("%s discard (-want +got):\n%s", ev.Type, diff)
			}
			open = nil
		}
	}
}

func TestQuotaAndUnavailableTexts(t *testing.T) {
	for text, want := range map[string][2]bool{
		"You've hit your rate limit. Please wait for your limit to reset":                               {true, false},
		"You've reached your weekly rate limit.":                                                        {true, false},
		"You've run out of your included AI credits for the month. Manage budget: https://github.com/x": {true, false},
		"This session has used 3 of 3 AI credits. Increase or remove the session limit to continue.":    {true, false},
		"boom\n(copilot error type: quota, code quota_exceeded)":                                        {true, false},
		"boom\n(copilot error type: rate_limit, HTTP 429)":                                              {true, false},
		"boom\n(copilot error type: context_limit)":                                                     {false, false},
		"Last error: 500 x\n(copilot error type: authentication, HTTP 401)":                             {false, false},
		"  Failed to fetch PAT user login: network fetch failed: request failed":                        {false, true},
		"Error: No authentication information found.":                                                   {false, false},
		"Request failed due to a transient API error. Retrying...":                                      {false, false},
		"the model call failed; retrying (attempt 2, rate_limit, HTTP 429)":                             {false, false},
		"the model call failed; retrying (attempt 2, api_error, HTTP 503)":                              {false, false},
		`{"type":"assistant.turn_retry","data":{"turnId":"0","model":"gpt-4.1","reason":"rate_limit"}}`: {false, false},
	} {
		if got := [2]bool{copilot.Quota(text), copilot.Unavailable(text)}; got != want {
			t.Errorf("(Quota, Unavailable)(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestQuotaDetails(t *testing.T) {
	before := time.Now().UTC().Truncate(time.Second)
	d := copilot.QuotaDetails("429 Rate limit reached for requests. Please try again in 1m30s.")
	r, _ := d["resets_at"].(string)
	at, err := time.Parse(time.RFC3339, r)
	if err != nil || at.Before(before.Add(90*time.Second)) || at.After(time.Now().Add(92*time.Second)) {
		t.Errorf("resets_at = %q (%v)", r, err)
	}
	if d := copilot.QuotaDetails("You've hit your rate limit."); d != nil {
		t.Errorf("no wait named: %v", d)
	}
	if d := copilot.QuotaDetails("try again in 99999999h"); d != nil {
		t.Errorf("absurd wait: %v", d)
	}
}

func readSession(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/session/resumed.events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const resumedID = "11111111-0000-4000-8000-000000000001"

// The session log was recorded from the pinned CLI against the fake: a
// text turn (one call), then --resume with a tool turn (two calls). Every
// call reported input 100 (cached 20), output 10.
var (
	oneCall  = harness.Usage{InputTokens: 80, OutputTokens: 10, CacheReadTokens: 20, Complete: true}
	twoCalls = harness.Usage{InputTokens: 160, OutputTokens: 20, CacheReadTokens: 40, Complete: true}
)

func TestTranscriptUsage(t *testing.T) {
	log := readSession(t)
	lines := bytes.SplitAfter(log, []byte("\n"))
	first := bytes.Join(lines[:8], nil) // the first run, up to its session.shutdown
	if !bytes.Contains(lines[7], []byte(`"session.shutdown"`)) {
		t.Fatalf("fixture changed: line 8 is %.60s", lines[7])
	}
	path := copilot.EventsFile(resumedID)
	tr := harness.Transcript{Native: resumedID, Files: map[string][]byte{path: log}, Before: map[string][]byte{path: first}}
	if diff := cmp.Diff(&twoCalls, copilot.TranscriptUsage(tr)); diff != "" {
		t.Errorf("resumed turn (-want +got):\n%s", diff)
	}
	three := harness.Usage{InputTokens: 240, OutputTokens: 30, CacheReadTokens: 60, Complete: true}
	if diff := cmp.Diff(&three, copilot.ThreadUsage(tr)); diff != "" {
		t.Errorf("thread (-want +got):\n%s", diff)
	}
	tr = harness.Transcript{Native: resumedID, Files: map[string][]byte{path: first}}
	if diff := cmp.Diff(&oneCall, copilot.TranscriptUsage(tr)); diff != "" {
		t.Errorf("new session (-want +got):\n%s", diff)
	}
	if u := copilot.TranscriptUsage(harness.Transcript{Native: resumedID}); u != nil {
		t.Errorf("no log: %+v", u)
	}
	golden, err := os.ReadFile(filepath.Join(goldenDir, "text.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	id := "0a0a0a0a-0000-4000-8000-000000000001"
	if diff := cmp.Diff(&oneCall, copilot.TranscriptUsage(harness.Transcript{Native: id, Files: map[string][]byte{copilot.EventsFile(id): golden}})); diff != "" {
		t.Errorf("golden text turn (-want +got):\n%s", diff)
	}
}

// TestUsageCommand runs the usage command's script with the real sh, grep
// and tail on the recorded session log, as the engine runs it in a
// sandbox, and decodes its output.
func TestUsageCommand(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	home := t.TempDir()
	dir := filepath.Join(home, ".copilot", "session-state", resumedID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A tool output line that mentions a record type must not count.
	log := append(readSession(t), []byte(`{"type":"tool.execution_complete","data":{"result":{"content":"{\"type\":\"session.usage_record\",\"data\":{\"usage\":{\"inputTokens\":999999}}}"}}}`+"\n")...)
	if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), log, 0o600); err != nil {
		t.Fatal(err)
	}
	c := copilot.UsageCommand(resumedID)
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("usage command: %v", err)
	}
	if diff := cmp.Diff(&twoCalls, copilot.UsageResult(out)); diff != "" {
		t.Errorf("UsageResult (-want +got):\n%s", diff)
	}
	cmd = exec.Command(c.Path, c.Args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	if err := cmd.Run(); err == nil {
		t.Error("the usage command succeeds without a session log")
	}
	if copilot.UsageCommand("../../etc") != nil {
		t.Error("UsageCommand accepts an id that is not a session id")
	}
}

func TestUsageResult(t *testing.T) {
	rec := `{"type":"session.usage_record","data":{"usage":{"inputTokens":100,"outputTokens":10,"cacheReadTokens":20,"cacheWriteTokens":5}},"id":"a"}`
	part := `{"type":"session.usage_record","data":{"usage":{"inputTokens":7,"outputTokens":1}},"id":"b"}`
	for name, tc := range map[string]struct {
		out  string
		want *harness.Usage
	}{
		"empty":        {"", nil},
		"garbage":      {"not json\n{\"type\":1}\n", nil},
		"start only":   {`{"type":"session.start"}`, &harness.Usage{Complete: true}},
		"one":          {`{"type":"session.start"}` + "\n" + rec, &harness.Usage{InputTokens: 75, OutputTokens: 10, CacheReadTokens: 20, CacheWriteTokens: 5, Complete: true}},
		"after resume": {rec + "\n" + `{"type":"session.resume"}` + "\n" + rec + "\n", &harness.Usage{InputTokens: 75, OutputTokens: 10, CacheReadTokens: 20, CacheWriteTokens: 5, Complete: true}},
		"cut off":      {"\"data\":{}}\n" + rec, &harness.Usage{InputTokens: 75, OutputTokens: 10, CacheReadTokens: 20, CacheWriteTokens: 5}},
		"partial":      {`{"type":"session.resume"}` + "\n" + part, &harness.Usage{InputTokens: 7, OutputTokens: 1}},
	} {
		if diff := cmp.Diff(tc.want, copilot.UsageResult([]byte(tc.out))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestStorageMatch(t *testing.T) {
	id := "0a0a0a0a-0000-4000-8000-000000000001"
	for rel, want := range map[string]bool{
		id + "/events.jsonl":                        true,
		id + "/workspace.yaml":                      true,
		id + "/checkpoints/index.md":                true,
		id + "/rewind-file-snapshots/tracking.json": true,
		id + "/.workspace-fork.lock":                false,
		".session-operation-locks/" + id + ".lock":  false,
		id:                            false,
		id + "/":                      false,
		id + "/../other/events.jsonl": false,
		"0a0a0a0a-0000-4000-8000-000000000002/x.json": false,
	} {
		if got := copilot.Match(rel, id); got != want {
			t.Errorf("Match(%q) = %v, want %v", rel, got, want)
		}
	}
	if copilot.Match("x/events.jsonl", "x") {
		t.Error("Match accepts a native id that is not a session id")
	}
}

func TestDecoderOddLines(t *testing.T) {
	dec := copilot.NewDecoder()
	for _, l := range []string{
		`{"type":"assistant.message","data":{"messageId":"m","content":"sub","parentToolCallId":"t1"}}`,
		`{"type":"assistant.message","data":{"messageId":"m2","content":"","toolRequests":[{"toolCallId":"c","name":"view","arguments":{"path":"x"}},"junk",{}]}}`,
		`{"type":"tool.execution_start","data":{"toolCallId":"c","toolName":"view"}}`,
		`{"type":"tool.execution_start","data":{"toolCallId":"d","toolName":"grep","arguments":{"pattern":"x"}}}`,
		`{"type":"tool.execution_complete","data":{"toolCallId":"d","success":false,"error":{"message":"denied","code":"denied"}}}`,
		`{"type":"assistant.usage","data":{"model":"m","inputTokens":50,"outputTokens":5,"cacheReadTokens":10,"cacheWriteTokens":0}}`,
		`{"type":"assistant.reasoning_delta","data":{"reasoningId":"r","deltaContent":"think"}}`,
		`{"type":"session.error","data":{"errorType":"<script>","message":""}}`,
		`{"type":"result","exitCode":0}`,
	} {
		for _, ev := range dec.Decode([]byte(l)) {
			if err := harnesstest.CheckEvent(ev); err != nil {
				t.Errorf("%s: %v", l, err)
			}
		}
	}
	// Replay to collect the interesting events in one pass.
	dec = copilot.NewDecoder()
	var evs []harness.Event
	for _, l := range []string{
		`{"type":"assistant.message","data":{"messageId":"m","content":"sub","parentToolCallId":"t1"}}`,
		`{"type":"assistant.message","data":{"messageId":"m2","content":"","toolRequests":[{"toolCallId":"c","name":"view","arguments":{"path":"x"}},"junk",{}]}}`,
		`{"type":"tool.execution_start","data":{"toolCallId":"c","toolName":"view"}}`,
		`{"type":"tool.execution_start","data":{"toolCallId":"d","toolName":"grep","arguments":{"pattern":"x"}}}`,
		`{"type":"tool.execution_complete","data":{"toolCallId":"d","success":false,"error":{"message":"denied","code":"denied"}}}`,
		`{"type":"assistant.usage","data":{"model":"m","inputTokens":50,"outputTokens":5,"cacheReadTokens":10,"cacheWriteTokens":0}}`,
		`{"type":"session.error","data":{"errorType":"<script>","message":""}}`,
		`{"type":"result","exitCode":0}`,
	} {
		evs = append(evs, dec.Decode([]byte(l))...)
	}
	calls := only(evs, harness.EventToolCall)
	if len(calls) != 3 || calls[0].Tool.Name != "view" || calls[2].Tool.Name != "grep" {
		t.Errorf("tool calls %+v", calls)
	}
	res := only(evs, harness.EventToolResult)
	if len(res) != 1 || !res[0].Tool.Error || res[0].Tool.Output != "denied" || res[0].Tool.Name != "grep" {
		t.Errorf("tool results %+v", res)
	}
	f := only(evs, harness.EventFailure)
	if len(f) != 1 || f[0].Kind != "unknown" {
		t.Errorf("failure %+v", f)
	}
	fin := only(evs, harness.EventFinished)
	want := &harness.Usage{InputTokens: 40, OutputTokens: 5, CacheReadTokens: 10, Complete: true}
	if len(fin) != 1 || fin[0].Text != "" || cmp.Diff(want, fin[0].Usage) != "" {
		t.Errorf("finished %+v: a sub-agent's message is not the answer; usage %+v", fin, fin[0].Usage)
	}
}
