package antigravity_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/antigravity"
	"github.com/outposthq/outpost/harness/harnesstest"
)

func TestConformance(t *testing.T) {
	harnesstest.RunConformanceTests(t, antigravity.Harness(), goldenDir)
}

func FuzzEvents(f *testing.F) {
	harnesstest.FuzzEvents(f, antigravity.Harness(), goldenDir)
}

func TestHarness(t *testing.T) {
	h := antigravity.Harness()
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if h.Forks() || !h.Resumes() || !h.RequiresFinishedEvent || h.Bootstrap != "antigravity" || h.Storage == nil || !h.Captures() {
		t.Errorf("preset %+v", h)
	}
	if h.Variables["AGY_CLI_DISABLE_AUTO_UPDATE"] == "" {
		t.Error("auto-update is not turned off")
	}
}

func TestRequest(t *testing.T) {
	cmd, err := antigravity.Request(harness.Input{Prompt: "-starts with a dash", Model: "gemini-3.7-flash-medium", Home: "/home/u"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-p", "-starts with a dash", "--output-format", "stream-json", "--print-timeout", "30m0s", "--model", "gemini-3.7-flash-medium", "--dangerously-skip-permissions"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if cmd.Path != "agy" || cmd.Stdin != nil || cmd.KeepStdin || cmd.Session != "" {
		t.Errorf("cmd %+v", cmd)
	}
	cmd, err = antigravity.Request(harness.Input{Prompt: "go on", Conversation: "abc-123",
		Options: map[string]string{"permissions": "plan", "effort": "high", "print-timeout": "1h"}, ExtraArgs: []string{"--add-dir", "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"-p", "go on", "--output-format", "stream-json", "--print-timeout", "1h0m0s", "--effort", "high", "--mode", "plan", "--conversation", "abc-123", "--add-dir", "/data"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	for _, p := range []string{"sandbox", "default", "accept-edits"} {
		cmd, err := antigravity.Request(harness.Input{Prompt: "x", Options: map[string]string{"permissions": p}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.Join(cmd.Args, " "), "--dangerously-skip-permissions") {
			t.Errorf("permissions=%s still skips permissions: %q", p, cmd.Args)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	for name, in := range map[string]harness.Input{
		"fork":          {Prompt: "x", Conversation: "abc", Fork: true},
		"bad id":        {Prompt: "x", Conversation: "../../etc"},
		"big prompt":    {Prompt: strings.Repeat("x", antigravity.MaxArgPrompt+1)},
		"nul":           {Prompt: "a\x00b"},
		"model":         {Prompt: "x", Model: "-x"},
		"option":        {Prompt: "x", Options: map[string]string{"nope": "1"}},
		"permissions":   {Prompt: "x", Options: map[string]string{"permissions": "yolo"}},
		"effort":        {Prompt: "x", Options: map[string]string{"effort": "extreme"}},
		"timeout":       {Prompt: "x", Options: map[string]string{"print-timeout": "soon"}},
		"extra conv":    {Prompt: "x", ExtraArgs: []string{"--conversation", "y"}},
		"extra cont":    {Prompt: "x", ExtraArgs: []string{"-c"}},
		"extra format":  {Prompt: "x", ExtraArgs: []string{"--output-format=json"}},
		"extra print":   {Prompt: "x", ExtraArgs: []string{"--print"}},
		"extra skip":    {Prompt: "x", ExtraArgs: []string{"--dangerously-skip-permissions"}},
		"extra timeout": {Prompt: "x", ExtraArgs: []string{"--print-timeout=1s"}},
	} {
		if _, err := antigravity.Request(in); err == nil {
			t.Errorf("%s: Request succeeded", name)
		}
	}
}

func TestCredentials(t *testing.T) {
	p, err := antigravity.Credentials(harness.Vars{"GEMINI_API_KEY": "k", "HOME": "/root"})
	if err != nil || p.Variables["GEMINI_API_KEY"] != "k" || len(p.HostFiles) != 0 {
		t.Errorf("api key: %+v %v", p, err)
	}
	p, err = antigravity.Credentials(harness.Vars{"HOME": "/root"})
	want := []harness.HostFile{{Source: "/root/.gemini/antigravity-cli/antigravity-oauth-token", Target: ".gemini/antigravity-cli/antigravity-oauth-token", Mode: 0o600, Optional: true, Exclusive: true}}
	if err != nil || p.Variables != nil || cmp.Diff(want, p.HostFiles) != "" {
		t.Errorf("token file: %+v %v", p, err)
	}
	if p, _ := antigravity.Credentials(harness.Vars{}); len(p.HostFiles)+len(p.Variables) != 0 {
		t.Errorf("nothing: %+v", p)
	}
	// Without the key the plan needs a credential (Plan.Need): the key or
	// the host's token file, which the message names.
	if p, _ := antigravity.Credentials(harness.Vars{"HOME": "/root"}); !strings.Contains(p.Need, "GEMINI_API_KEY") || !strings.Contains(p.Need, "antigravity-oauth-token") {
		t.Errorf("need %q", p.Need)
	}
	if p, _ := antigravity.Credentials(harness.Vars{"GEMINI_API_KEY": "k"}); p.Need != "" {
		t.Errorf("with the key: need %q", p.Need)
	}
}

func TestConfiguration(t *testing.T) {
	c, err := antigravity.Configuration(harness.Vars{"CLOUD_CODE_URL": "https://example.test", "GEMINI_API_KEY": "k"})
	if err != nil || cmp.Diff(map[string]string{"CLOUD_CODE_URL": "https://example.test"}, c.Variables) != "" {
		t.Errorf("%+v %v", c, err)
	}
	if _, err := antigravity.Configuration(harness.Vars{"CLOUD_CODE_URL": "file:///secret-path"}); err == nil || strings.Contains(err.Error(), "secret-path") {
		t.Errorf("a bad URL: %v", err)
	}
}

func decode(t *testing.T, name, resume string) []harness.Event {
	t.Helper()
	dec := antigravity.NewDecoder(resume)
	var evs []harness.Event
	for _, l := range goldenLines(t, name) {
		evs = append(evs, dec.Decode(l)...)
	}
	return evs
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

var publishedUsage = &harness.Usage{InputTokens: 200, OutputTokens: 30, CacheReadTokens: 1000, Complete: true}

func TestDecodeText(t *testing.T) {
	evs := decode(t, "text", "")
	s := only(evs, harness.EventSession)
	if len(s) != 1 || s[0].Session != "00000000-0000-4000-8000-000000000001" || s[0].Details["model"] != "gemini-3.7-flash-medium" {
		t.Errorf("session %+v", s)
	}
	var deltas, full string
	for _, ev := range only(evs, harness.EventMessage) {
		if ev.Delta {
			deltas += ev.Text
		} else {
			full = ev.Text
		}
	}
	fin := only(evs, harness.EventFinished)
	if len(fin) != 1 || fin[0].Text != "agy: Say hello (turn 1)\n" || deltas != fin[0].Text || full != fin[0].Text || fin[0].Stop != "end_turn" {
		t.Fatalf("finished %+v, deltas %q, message %q", fin, deltas, full)
	}
	if diff := cmp.Diff(publishedUsage, fin[0].Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if len(only(evs, harness.EventFailure)) != 0 {
		t.Error("failures in a successful turn")
	}
}

func TestDecodeTool(t *testing.T) {
	evs := decode(t, "tool", "")
	calls, results := only(evs, harness.EventToolCall), only(evs, harness.EventToolResult)
	if len(calls) != 1 || calls[0].Tool.Name != "run_command" || string(calls[0].Tool.Input) != `{"CommandLine":"echo hi"}` {
		t.Fatalf("calls %+v", calls)
	}
	if len(results) != 1 || results[0].Tool.ID != calls[0].Tool.ID || results[0].Tool.Output != "hi\n" || results[0].Tool.Error {
		t.Errorf("results %+v", results)
	}
}

func TestDecodeResume(t *testing.T) {
	id := "00000000-0000-4000-8000-000000000001"
	evs := decode(t, "resume", id)
	if s := only(evs, harness.EventSession); len(s) != 1 || s[0].Session != id {
		t.Errorf("session %+v", s)
	}
	if fin := only(evs, harness.EventFinished); len(fin) != 1 || !strings.Contains(fin[0].Text, "turn 2") || fin[0].Details["num_turns"] != int64(2) {
		t.Errorf("finished %+v", fin)
	}
	if f := only(evs, harness.EventFailure); len(f) != 0 {
		t.Errorf("failures %+v", f)
	}
}

// TestDecodeResumeLost: agy answers an unknown --conversation with a new
// conversation and exit 0; the turn must fail, and no session event may
// announce the new id (the stored conversation keeps its own).
func TestDecodeResumeLost(t *testing.T) {
	asked := "11111111-2222-4333-8444-555555555555"
	evs := decode(t, "resume-lost", asked)
	if s := only(evs, harness.EventSession); len(s) != 0 {
		t.Errorf("a session event for the new conversation: %+v", s)
	}
	f := only(evs, harness.EventFailure)
	if len(f) != 1 || f[0].Kind != "resume_lost" || f[0].Details["resume"] != asked || f[0].Details["started"] != "00000000-0000-4000-8000-000000000001" {
		t.Errorf("failures %+v", f)
	}
	if goldenExit(t, "resume-lost") != 0 || !strings.Contains(string(golden(t, "resume-lost.stderr")), "not found") {
		t.Error("the stand-in does not reproduce the published behaviour (warning, exit 0)")
	}
	// A new conversation's decoder takes the same output as a success.
	if f := only(decode(t, "resume-lost", ""), harness.EventFailure); len(f) != 0 {
		t.Errorf("without a resume: %+v", f)
	}
}

func TestDecodeResultFailures(t *testing.T) {
	for name, kind := range map[string]string{"result-error": "error", "denied": "permission_denied"} {
		evs := decode(t, name, "")
		f := only(evs, harness.EventFailure)
		if len(f) != 1 || f[0].Kind != kind {
			t.Errorf("%s: failures %+v", name, f)
			continue
		}
		if fin := only(evs, harness.EventFinished); len(fin) != 1 || fin[0].Stop == "end_turn" {
			t.Errorf("%s: finished %+v", name, fin)
		}
	}
	evs := decode(t, "denied", "")
	if f := only(evs, harness.EventFailure); !strings.Contains(f[0].Text, "run_command") {
		t.Errorf("denied text %q", f[0].Text)
	}
	if f := only(decode(t, "result-error", ""), harness.EventFailure); f[0].Text != "INTERNAL (code 500): Internal error encountered." || f[0].Details["error_code"] != int64(500) {
		t.Errorf("result error %+v", f[0])
	}
}

// TestClassify checks Quota and Unavailable on the stderr of every case
// and the exit codes the stand-in reproduces.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name               string
		exit               int
		quota, unavailable bool
	}{
		{"quota", 3, true, false},
		{"outage", 3, false, true},
		{"result-error", 3, false, true},
		{"auth", 3, false, false},
		{"text", 0, false, false},
		{"resume-lost", 0, false, false},
		{"empty", 0, false, false},
	} {
		if got := goldenExit(t, tc.name); got != tc.exit {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.exit)
		}
		var quota, unavailable bool
		for _, line := range strings.Split(string(golden(t, tc.name+".stderr")), "\n") {
			quota = quota || antigravity.Quota(line)
			unavailable = unavailable || antigravity.Unavailable(line)
		}
		if quota != tc.quota || unavailable != tc.unavailable {
			t.Errorf("%s: quota %v unavailable %v, want %v %v", tc.name, quota, unavailable, tc.quota, tc.unavailable)
		}
	}
	if len(goldenLines(t, "empty")) != 0 {
		t.Error("the empty case has output")
	}
}

func TestQuotaDetails(t *testing.T) {
	line := strings.TrimSpace(string(golden(t, "quota.stderr")))
	before := time.Now().UTC()
	d := antigravity.QuotaDetails(line)
	r, _ := d["resets_at"].(string)
	at, err := time.Parse(time.RFC3339, r)
	want := 146*time.Hour + 14*time.Minute + 2*time.Second
	if err != nil || at.Before(before.Add(want).Truncate(time.Second)) || at.After(time.Now().Add(want+2*time.Second)) {
		t.Errorf("resets_at %q (%v), want now + %v", r, err, want)
	}
	for text, want := range map[string]time.Duration{
		"Quota exhausted. Resets in 2d3h.":   51 * time.Hour,
		"resets in 45m":                      45 * time.Minute,
		"RESOURCE_EXHAUSTED: Resets in 1.5h": 90 * time.Minute,
	} {
		d := antigravity.QuotaDetails(text)
		r, _ := d["resets_at"].(string)
		at, err := time.Parse(time.RFC3339, r)
		if err != nil || at.Sub(time.Now()) < want-2*time.Second || at.Sub(time.Now()) > want+2*time.Second {
			t.Errorf("%q: resets_at %q", text, r)
		}
	}
	for _, text := range []string{"Resets in 99999d", "no reset here", ""} {
		if d := antigravity.QuotaDetails(text); d != nil {
			t.Errorf("%q: %v", text, d)
		}
	}
}

func TestQuotaAndUnavailableTexts(t *testing.T) {
	for text, want := range map[string][2]bool{
		`AGY_ERROR: {"status":"RESOURCE_EXHAUSTED","error_code":429}`:       {true, false},
		`AGY_ERROR: {"status":"UNKNOWN","error_code":429,"retryable":true}`: {true, false},
		`AGY_ERROR: {"status":"UNAVAILABLE","error_code":503}`:              {false, true},
		`AGY_ERROR: {"status":"DEADLINE_EXCEEDED"}`:                         {false, true},
		`AGY_ERROR: {"status":"SOMETHING","error_code":502}`:                {false, true},
		`AGY_ERROR: {"status":"SOMETHING","retryable":true}`:                {false, true},
		`AGY_ERROR: {"status":"UNAUTHENTICATED","error_code":401}`:          {false, false},
		`AGY_ERROR: {"status":"INVALID_ARGUMENT","error_code":400}`:         {false, false},
		`AGY_ERROR: not json`: {false, false},
		"RESOURCE_EXHAUSTED (code 429): Individual quota reached. Resets in 1h.": {true, false},
		"You have exhausted your daily quota on this model.":                     {true, false},
		"The model is overloaded. Please try again later.":                       {false, true},
		"authentication required":                                                {false, false},
		"Warning: conversation x not found; starting a new conversation":         {false, false},
	} {
		if got := [2]bool{antigravity.Quota(text), antigravity.Unavailable(text)}; got != want {
			t.Errorf("(Quota, Unavailable)(%q) = %v, want %v", text, got, want)
		}
	}
	e, ok := antigravity.ParseError(`AGY_ERROR: {"status":"RESOURCE_EXHAUSTED","error_code":429,"retryable":false,"error_id":"e1","short_error":"s"}`)
	if !ok || e.Status != "RESOURCE_EXHAUSTED" || e.ErrorCode != 429 || e.Retryable == nil || *e.Retryable || e.ErrorID != "e1" || e.ShortError != "s" {
		t.Errorf("ParseError = %+v %v", e, ok)
	}
}

func TestStorageMatch(t *testing.T) {
	id := "00000000-0000-4000-8000-000000000001"
	for rel, want := range map[string]bool{
		id + "/.system_generated/logs/transcript.jsonl": true,
		id + "/conversation.db":                         true,
		id + "/x.lock":                                  false,
		id:                                              false,
		id + "/../other/x":                              false,
		"other/" + id + "/x":                            false,
	} {
		if got := antigravity.Match(rel, id); got != want {
			t.Errorf("Match(%q) = %v, want %v", rel, got, want)
		}
	}
	if antigravity.Match("../x/y", "..") {
		t.Error("Match accepts an unsafe id")
	}
}
