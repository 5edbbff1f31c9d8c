package claude_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
)

func TestSlug(t *testing.T) {
	// cli-facts §3.
	cases := map[string]string{
		"/home/u/w-a.b/c_d e":       "-home-u-w-a-b-c-d-e",
		"/home/u/w-Up/Ünï":          "-home-u-w-Up--n-",
		"/tmp/outpost-golden/x/":    "-tmp-outpost-golden-x",
		"/home/u/emoji/\U0001F600x": "-home-u-emoji---x",
		"/":                         "-",
	}
	for in, want := range cases {
		if got := claude.Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatchAndPlace(t *testing.T) {
	st := claude.Storage()
	match := map[string]bool{
		"-w/" + sid + ".jsonl":                    true,
		"-other-cwd/" + sid + ".jsonl":            true,
		"-w/" + sid + "/subagents/agent-1.jsonl":  true,
		"-w/" + sid + "/tool-results/t1.txt":      true,
		"-w/" + sid + ".jsonl.tmp":                false,
		sid + ".jsonl":                            false,
		"-w/x/" + sid + ".jsonl":                  false,
		"-w/other.jsonl":                          false,
		"-w/" + sid + "/":                         false,
		"-w/memory/MEMORY.md":                     false,
		"-w/6d15da34-ba14-4aa1-9597-36abbb77e13f": false,
	}
	for rel, want := range match {
		if got := st.Match(rel, sid); got != want {
			t.Errorf("Match(%q) = %v", rel, got)
		}
	}
	if st.Match("-w/x.jsonl", "x") || st.Match("-w/...jsonl", "..") {
		t.Error("Match accepts a native id that is not a session id")
	}
	place := []struct{ rel, wd, want string }{
		{"-old-cwd/" + sid + ".jsonl", "/home/agent/work", "-home-agent-work/" + sid + ".jsonl"},
		{"-old-cwd/" + sid + "/subagents/a.jsonl", "/w", "-w/" + sid + "/subagents/a.jsonl"},
		{"-old-cwd/" + sid + ".jsonl", "relative/dir", "-old-cwd/" + sid + ".jsonl"},
		{"-old-cwd/" + sid + ".jsonl", "/" + strings.Repeat("long", 60), "-old-cwd/" + sid + ".jsonl"},
	}
	for _, p := range place {
		got := st.Place(p.rel, sid, p.wd)
		if got != p.want {
			t.Errorf("Place(%q, %q) = %q, want %q", p.rel, p.wd, got, p.want)
		}
		if !harness.RelativePath(got) {
			t.Errorf("Place(%q, %q) = %q is not a relative path", p.rel, p.wd, got)
		}
	}
}

// sessionFile reads a golden session file as a Transcript file map entry.
func sessionFile(t *testing.T, name, id string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name+".session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{claude.ProjectsDir + "/-tmp-outpost-golden-claude-sessions-work/" + id + ".jsonl": b}
}

func TestTranscriptUsage(t *testing.T) {
	const s1 = "6d15da34-ba14-4aa1-9597-36abbb77e13e"
	const f1 = "6aa920dc-4479-44ce-ae72-945b42950d97"
	tool := sessionFile(t, "tool", "27d24d4b-c0cd-446f-9893-94cbf4b20ae9")
	cases := []struct {
		name string
		tr   harness.Transcript
		want *harness.Usage
	}{
		// A tool turn: two API messages, the first on two lines (text and
		// tool_use), deduped by message id: 24/14 as the result reported.
		{"tool turn", harness.Transcript{Native: "27d24d4b-c0cd-446f-9893-94cbf4b20ae9", Files: tool}, &harness.Usage{InputTokens: 24, OutputTokens: 14, Complete: true}},
		// A resumed turn: the file holds both turns; the restored file held
		// the first.
		{"resume", harness.Transcript{Native: s1, Files: sessionFile(t, "resume", s1), Before: sessionFile(t, "resume_base", s1)}, &harness.Usage{InputTokens: 12, OutputTokens: 7, Complete: true}},
		{"resume, whole session", harness.Transcript{Native: s1, Files: sessionFile(t, "resume", s1)}, &harness.Usage{InputTokens: 24, OutputTokens: 14, Complete: true}},
		// A fork: its file copies the parent's history with the same
		// message ids.
		{"fork", harness.Transcript{Native: f1, Files: sessionFile(t, "fork", f1), Before: sessionFile(t, "resume", s1)}, &harness.Usage{InputTokens: 12, OutputTokens: 7, Complete: true}},
		{"no session file", harness.Transcript{Native: f1, Files: tool}, nil},
		{"not a session id", harness.Transcript{Native: "x", Files: tool}, nil},
	}
	for _, c := range cases {
		got := claude.TranscriptUsage(c.tr)
		switch {
		case got == nil && c.want == nil:
		case got == nil || c.want == nil || *got != *c.want:
			t.Errorf("%s: usage %+v, want %+v", c.name, got, c.want)
		}
	}
	// A usage without all counters is incomplete.
	line := `{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":3,"output_tokens":4}}}` + "\n"
	u := claude.TranscriptUsage(harness.Transcript{Native: s1, Files: map[string][]byte{claude.ProjectsDir + "/-w/" + s1 + ".jsonl": []byte(line)}})
	if u == nil || u.Complete || u.InputTokens != 3 || u.OutputTokens != 4 {
		t.Errorf("partial usage %+v", u)
	}
}

func TestThreadUsage(t *testing.T) {
	const s1 = "6d15da34-ba14-4aa1-9597-36abbb77e13e"
	const f1 = "6aa920dc-4479-44ce-ae72-945b42950d97"
	cases := []struct {
		name string
		tr   harness.Transcript
		want harness.Usage
	}{
		{"resumed session: both turns", harness.Transcript{Native: s1, Files: sessionFile(t, "resume", s1)}, harness.Usage{InputTokens: 24, OutputTokens: 14, Complete: true}},
		{"fork: inherits the parent's", harness.Transcript{Native: f1, Files: sessionFile(t, "fork", f1)}, harness.Usage{InputTokens: 36, OutputTokens: 21, Complete: true}},
	}
	for _, c := range cases {
		got := claude.ThreadUsage(c.tr)
		if got == nil || *got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if u := claude.ThreadUsage(harness.Transcript{Native: f1, Files: sessionFile(t, "resume", s1)}); u != nil {
		t.Errorf("no file for the id: %+v", u)
	}
}

// TestHistory reads a tool turn's exchange from its recorded transcript:
// the prompt, the answer's text, the tool use and its result (a user line),
// the final answer; attachments and bookkeeping lines give nothing.
func TestHistory(t *testing.T) {
	const id = "27d24d4b-c0cd-446f-9893-94cbf4b20ae9"
	got := claude.History(harness.Transcript{Native: id, Files: sessionFile(t, "tool", id)})
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, string(e.Type)+":"+e.Kind)
	}
	want := []string{"message:user", "message:", "tool_call:", "tool_result:", "message:"}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Fatalf("History kinds %v, want %v", kinds, want)
	}
	if got[0].Text != "FAKE_TOOL:echo hi > out.txt; echo hi" || got[2].Tool.Name != "Bash" || got[3].Tool.ID != "toolu_fake_1" || got[3].Tool.Output != "hi" ||
		got[4].Text != "ECHO nmsg=4 last_user=[tool_result] hi" {
		t.Errorf("History = %+v", got)
	}
	if claude.History(harness.Transcript{Native: "6d15da34-ba14-4aa1-9597-36abbb77e13e", Files: sessionFile(t, "tool", id)}) != nil {
		t.Error("History of another session")
	}
}
