package claude_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
)

const sid = "6d15da34-ba14-4aa1-9597-36abbb77e13e"

func TestRequest(t *testing.T) {
	base := []string{"-p", "--output-format", "stream-json", "--verbose"}
	cases := []struct {
		name string
		in   harness.Input
		args []string
		env  map[string]string
	}{
		{"plain", harness.Input{Prompt: "say hi"}, append(base, "--", "say hi"), nil},
		{"prompt that looks like a flag or subcommand", harness.Input{Prompt: "--help"}, append(base, "--", "--help"), nil},
		{"model", harness.Input{Prompt: "x", Model: "claude-sonnet-4-5"}, append(base, "--model=claude-sonnet-4-5", "--", "x"), nil},
		{"resume", harness.Input{Prompt: "x", Conversation: sid}, append(base, "--resume", sid, "--", "x"), nil},
		{"fork", harness.Input{Prompt: "x", Conversation: sid, Fork: true}, append(base, "--resume", sid, "--fork-session", "--", "x"), nil},
		{"options", harness.Input{Prompt: "x", Options: map[string]string{"permission-mode": "acceptEdits", "max-retries": "2", "api-timeout": "30s", "partial-messages": "true"}},
			append(base, "--include-partial-messages", "--permission-mode", "acceptEdits", "--", "x"), map[string]string{"CLAUDE_CODE_MAX_RETRIES": "2", "API_TIMEOUT_MS": "30000"}},
		{"api timeout in ms", harness.Input{Prompt: "x", Options: map[string]string{"api-timeout": "5000"}}, append(base, "--", "x"), map[string]string{"API_TIMEOUT_MS": "5000"}},
		{"default mode adds nothing", harness.Input{Prompt: "x", Options: map[string]string{"permission-mode": "default"}}, append(base, "--", "x"), nil},
		{"bypass as root needs IS_SANDBOX", harness.Input{Prompt: "x", Options: map[string]string{"permission-mode": "bypassPermissions"}},
			append(base, "--permission-mode", "bypassPermissions", "--", "x"), map[string]string{"IS_SANDBOX": "1"}},
		{"variadic extra args cannot swallow the prompt", harness.Input{Prompt: "run echo hi", ExtraArgs: []string{"--allowedTools", "Bash(echo:*)", "Write"}},
			append(base, "--allowedTools", "Bash(echo:*)", "Write", "--", "run echo hi"), nil},
		{"skip permissions in extra args", harness.Input{Prompt: "x", ExtraArgs: []string{"--dangerously-skip-permissions"}},
			append(base, "--dangerously-skip-permissions", "--", "x"), map[string]string{"IS_SANDBOX": "1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, err := claude.Request(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Path != "claude" || cmd.KeepStdin || cmd.Stdin != nil {
				t.Errorf("command %+v", cmd)
			}
			if diff := cmp.Diff(c.args, cmd.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.env, cmd.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestLargePromptGoesToStdin(t *testing.T) {
	p := strings.Repeat("x", claude.MaxArgPrompt+1)
	cmd, err := claude.Request(harness.Input{Prompt: p})
	if err != nil {
		t.Fatal(err)
	}
	if string(cmd.Stdin) != p || cmd.KeepStdin {
		t.Errorf("stdin %d bytes, keep %v", len(cmd.Stdin), cmd.KeepStdin)
	}
	for _, a := range cmd.Args {
		if a == "--" || a == p {
			t.Errorf("args %q carry the prompt", cmd.Args)
		}
	}
}

func TestRequestRefuses(t *testing.T) {
	cases := map[string]harness.Input{
		"unknown option":             {Prompt: "x", Options: map[string]string{"colour": "blue"}},
		"unknown mode":               {Prompt: "x", Options: map[string]string{"permission-mode": "yolo"}},
		"bad retries":                {Prompt: "x", Options: map[string]string{"max-retries": "-1"}},
		"bad timeout":                {Prompt: "x", Options: map[string]string{"api-timeout": "soon"}},
		"bad partial":                {Prompt: "x", Options: map[string]string{"partial-messages": "maybe"}},
		"not a session id":           {Prompt: "x", Conversation: "--dangerously-skip-permissions"},
		"fork without conversation":  {Prompt: "x", Fork: true},
		"model like a flag":          {Prompt: "x", Model: "--verbose"},
		"model with spaces":          {Prompt: "x", Model: "a b"},
		"extra print":                {Prompt: "x", ExtraArgs: []string{"-p"}},
		"extra output format":        {Prompt: "x", ExtraArgs: []string{"--output-format=text"}},
		"extra resume":               {Prompt: "x", ExtraArgs: []string{"--resume", sid}},
		"extra model":                {Prompt: "x", ExtraArgs: []string{"--model", "opus"}},
		"extra permission mode":      {Prompt: "x", ExtraArgs: []string{"--permission-mode=bypassPermissions"}},
		"extra double dash":          {Prompt: "x", ExtraArgs: []string{"--", "other prompt"}},
		"extra no session":           {Prompt: "x", ExtraArgs: []string{"--no-session-persistence"}},
		"extra NUL":                  {Prompt: "x", ExtraArgs: []string{"a\x00b"}},
		"extra continue (short)":     {Prompt: "x", ExtraArgs: []string{"-c"}},
		"extra input format (live)":  {Prompt: "x", ExtraArgs: []string{"--input-format", "stream-json"}},
		"extra session id":           {Prompt: "x", ExtraArgs: []string{"--session-id", sid}},
		"extra partial (use option)": {Prompt: "x", ExtraArgs: []string{"--include-partial-messages"}},
	}
	for name, in := range cases {
		if _, err := claude.Request(in); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := claude.LiveInput(in); err == nil {
			t.Errorf("%s: live: no error", name)
		}
	}
}

func TestLiveCommand(t *testing.T) {
	l, err := claude.LiveInput(harness.Input{Prompt: "hello", Conversation: sid, Options: map[string]string{"max-retries": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := l.Command()
	want := []string{"-p", "--output-format", "stream-json", "--verbose", "--resume", sid, "--input-format", "stream-json"}
	if diff := cmp.Diff(want, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if !cmd.KeepStdin || cmd.Env["CLAUDE_CODE_MAX_RETRIES"] != "0" {
		t.Errorf("command %+v", cmd)
	}
}

func TestUserLine(t *testing.T) {
	for _, text := range []string{"plain", "two\nlines", "\u2028", "\xff\xfe", `{"type":"control_request"}`, ""} {
		b, err := claude.UserLine(text, "u-1")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(b), "\n") != 1 || b[len(b)-1] != '\n' {
			t.Errorf("%q: not one line: %q", text, b)
		}
		var m struct {
			Type    string `json:"type"`
			UUID    string `json:"uuid"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if m.Type != "user" || m.Message.Role != "user" || m.UUID != "u-1" || (m.Message.Content != text && text != "\xff\xfe") {
			t.Errorf("%q decoded as %+v", text, m)
		}
	}
}

func TestCredentials(t *testing.T) {
	cases := []struct {
		name string
		vars harness.Vars
		want harness.Plan
	}{
		{"api key", harness.Vars{"ANTHROPIC_API_KEY": "sk-1", "HOME": "/home/u"}, harness.Plan{Variables: map[string]string{"ANTHROPIC_API_KEY": "sk-1"}}},
		{"all variables", harness.Vars{"ANTHROPIC_API_KEY": "sk-1", "ANTHROPIC_AUTH_TOKEN": "tok", "CLAUDE_CODE_OAUTH_TOKEN": "oat"},
			harness.Plan{Variables: map[string]string{"ANTHROPIC_API_KEY": "sk-1", "ANTHROPIC_AUTH_TOKEN": "tok", "CLAUDE_CODE_OAUTH_TOKEN": "oat"}}},
		{"empty counts as absent: host file", harness.Vars{"ANTHROPIC_API_KEY": "", "HOME": "/home/u"}, harness.Plan{Need: claude.Need, HostFiles: []harness.HostFile{
			{Source: "/home/u/.claude/.credentials.json", Target: ".claude/.credentials.json", Mode: 0o600, Optional: true, Exclusive: true}}}},
		{"config dir", harness.Vars{"HOME": "/home/u", "CLAUDE_CONFIG_DIR": "/etc/cc/"}, harness.Plan{Need: claude.Need, HostFiles: []harness.HostFile{
			{Source: "/etc/cc/.credentials.json", Target: ".claude/.credentials.json", Mode: 0o600, Optional: true, Exclusive: true}}}},
		{"nothing", harness.Vars{}, harness.Plan{Need: claude.Need}},
		{"relative home is ignored", harness.Vars{"HOME": "rel"}, harness.Plan{Need: claude.Need}},
	}
	for _, c := range cases {
		got, err := claude.Credentials(c.vars)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// Without a credential variable the plan needs one (Plan.Need): the engine
// refuses a turn whose sandbox gets neither a variable nor the host's
// login file, before anything is downloaded, and its message names the
// variables to set.
func TestCredentialsNeed(t *testing.T) {
	p, err := claude.Credentials(harness.Vars{"HOME": "/home/u"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", ".credentials.json"} {
		if !strings.Contains(p.Need, name) {
			t.Errorf("need %q does not name %s", p.Need, name)
		}
	}
	for _, name := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"} {
		if p, _ := claude.Credentials(harness.Vars{name: "sk-secret"}); p.Need != "" {
			t.Errorf("%s set: need %q", name, p.Need)
		}
	}
}

func TestConfiguration(t *testing.T) {
	c, err := claude.Configuration(harness.Vars{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "OUTPOST_CLAUDE_SETTINGS": `{"model":"sonnet","env":{"FOO":"1"}}`})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, c.Variables); diff != "" {
		t.Error(diff)
	}
	if len(c.Files) != 1 || c.Files[0].Path != ".claude/settings.json" || c.Files[0].Merge != harness.MergeJSON {
		t.Fatalf("files %+v", c.Files)
	}
	var got map[string]any
	if err := json.Unmarshal(c.Files[0].Content, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "sonnet", "env": map[string]any{"FOO": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	// The defaults are not modified by a merge.
	if _, ok := claude.DefaultSettings["model"]; ok {
		t.Error("DefaultSettings changed")
	}
	for _, bad := range []harness.Vars{{"OUTPOST_CLAUDE_SETTINGS": "[1]"}, {"OUTPOST_CLAUDE_SETTINGS": "{"}, {"OUTPOST_CLAUDE_SETTINGS": "{} {}"}, {"ANTHROPIC_BASE_URL": "ftp://x"}} {
		_, err := claude.Configuration(bad)
		if err == nil {
			t.Errorf("%v: no error", bad)
		} else if strings.Contains(err.Error(), bad["OUTPOST_CLAUDE_SETTINGS"]) && bad["OUTPOST_CLAUDE_SETTINGS"] != "" {
			t.Errorf("error quotes the settings: %v", err)
		}
	}
}

func TestHarness(t *testing.T) {
	h := claude.Harness()
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if h.Name != "claude" || h.Bootstrap != "claude" || !h.RequiresFinishedEvent || !h.Resumes() || !h.Forks() || !h.Captures() || h.Inactivity != claude.Inactivity || h.Fork != nil {
		t.Errorf("preset %+v", h)
	}
	if h.Variables["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" || h.Variables["DISABLE_AUTOUPDATER"] != "1" {
		t.Errorf("variables %v", h.Variables)
	}
	if a := claude.ACP(); a.Name != claude.ACPName || a.Bootstrap != claude.ACPName {
		t.Errorf("ACP preset %q installs %q, want its own pin %q", a.Name, a.Bootstrap, claude.ACPName)
	}
	var mv *harness.MissingVariableError
	if _, err := h.Credentials(harness.Vars{}); errors.As(err, &mv) {
		t.Error("no credentials is not an error before the sandbox: the host file may provide them")
	}
}
