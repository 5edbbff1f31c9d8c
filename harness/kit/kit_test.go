package kit_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

func TestOpening(t *testing.T) {
	cases := []struct {
		name string
		o    kit.Opening
		in   harness.Input
		want string // "" = accepted
	}{
		{"plain", kit.Opening{Preset: "x"}, harness.Input{Prompt: "hi"}, ""},
		{"fork", kit.Opening{Preset: "x"}, harness.Input{Prompt: "hi", Conversation: "c", Fork: true}, ""},
		{"fork without parent", kit.Opening{Preset: "x"}, harness.Input{Prompt: "hi", Fork: true}, "x: fork needs the conversation to fork"},
		{"fork without thread", kit.Opening{Preset: "x", Parent: "thread"}, harness.Input{Prompt: "hi", Fork: true}, "x: fork needs the thread to fork"},
		{"no fork", kit.Opening{Preset: "x", NoFork: "no way"}, harness.Input{Prompt: "hi", Conversation: "c", Fork: true}, "x: conversations cannot be forked (no way)"},
		{"resume with no fork", kit.Opening{Preset: "x", NoFork: "no way"}, harness.Input{Prompt: "hi", Conversation: "c"}, ""},
		{"NUL prompt", kit.Opening{Preset: "x"}, harness.Input{Prompt: "a\x00b"}, "x: the prompt contains a NUL byte"},
		{"NUL model", kit.Opening{Preset: "x"}, harness.Input{Prompt: "a", Model: "m\x00"}, "x: the model name contains a NUL byte"},
		{"NUL conversation", kit.Opening{Preset: "x"}, harness.Input{Prompt: "a", Conversation: "\x00"}, "x: the conversation id contains a NUL byte"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.o.Check(c.in)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("Check = %q, want %q", got, c.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	f := kit.Flags{"-p": "", "--model": "use the agent's model", "--print": ""}
	cases := []struct {
		arg, want string
	}{
		{"--verbose", ""},
		{"value", ""},
		{"-p", "-p is set by outpost"},
		{"--print", "--print is set by outpost"},
		{"--model", "--model is set by outpost: use the agent's model"},
		{"--model=x", "--model is set by outpost: use the agent's model"},
		{"-p=x", ""}, // a short flag's value is its own argument
		{"a\x00b", "contains a NUL byte"},
		{"--model-x", ""},
	}
	for _, c := range cases {
		t.Run(c.arg, func(t *testing.T) {
			err := f.Check(c.arg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("Check(%q) = %q, want %q", c.arg, got, c.want)
			}
		})
	}
	err := kit.CheckExtraArgs("x", []string{"--ok", "--print"}, f.Check)
	if err == nil || err.Error() != "x: extra argument 2: --print is set by outpost" {
		t.Errorf("CheckExtraArgs = %v", err)
	}
	if err := kit.CheckExtraArgs("x", nil, f.Check); err != nil {
		t.Errorf("no arguments: %v", err)
	}
}

func TestDetails(t *testing.T) {
	d := kit.Details{}
	if d.Map() != nil {
		t.Error("empty details are not nil")
	}
	d.Str("empty", "")
	d.Str("s", "v")
	d.Num("absent", 3, false)
	d.Num("n", 3, true)
	d.Bool("absent-bool", true, false)
	d.Bool("b", false, true)
	d.Merge(map[string]any{"status": "rejected", "resets_at": "t"}, "status")
	d.Merge(nil)
	want := map[string]any{"s": "v", "n": int64(3), "b": false, "resets_at": "t"}
	if diff := cmp.Diff(want, d.Map()); diff != "" {
		t.Errorf("details (-want +got):\n%s", diff)
	}
	if got := kit.Strs("a", "", "b", "2", "odd"); !cmp.Equal(got, map[string]any{"b": "2"}) {
		t.Errorf("Strs = %v", got)
	}
	if got := kit.Strs("a", ""); got != nil {
		t.Errorf("Strs of empty values = %v, want nil", got)
	}
}

func TestResetsAt(t *testing.T) {
	from := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	cases := []struct {
		wait time.Duration
		want string
	}{
		{0, "2026-01-02T02:04:05Z"},
		{time.Second, "2026-01-02T02:04:06Z"},
		{1500 * time.Millisecond, "2026-01-02T02:04:07Z"}, // rounded up, never before the reset
		{-time.Second, ""},
		{kit.MaxWait + time.Second, ""},
	}
	for _, c := range cases {
		if got := kit.ResetsAt(from, c.wait); got != c.want {
			t.Errorf("ResetsAt(%v) = %q, want %q", c.wait, got, c.want)
		}
	}
}

func TestMarshal(t *testing.T) {
	if got := string(kit.Marshal(map[string]any{"a": "<b>&"})); got != `{"a":"<b>&"}` {
		t.Errorf("Marshal = %s", got)
	}
	if kit.Marshal(func() {}) != nil {
		t.Error("an unencodable value gave JSON")
	}
}

func TestUUID(t *testing.T) {
	for i := 0; i < 100; i++ {
		id, err := kit.NewUUID()
		if err != nil || !kit.UUID(id) || id[14] != '4' || !strings.ContainsAny(id[19:20], "89ab") {
			t.Fatalf("NewUUID = %q, %v", id, err)
		}
	}
	for _, bad := range []string{"", "x", "cfe532c8-c139-441f-962b-cf2a8e41b1b", "cfe532c8-c139-441f-962b-cf2a8e41b1b1\n", "../cfe532c8-c139-441f-962b-cf2a8e41b1b1"} {
		if kit.UUID(bad) {
			t.Errorf("UUID(%q)", bad)
		}
	}
}

// Example is a preset written outside outpost's module, for a CLI "mycli"
// that prints JSON lines: the kit gives it the same opening checks,
// extra-argument refusal, tolerant reader and failure details as the
// built-in presets.
func Example() {
	reserved := kit.Flags{"--json": "", "--session": "use Resume"}
	h := &harness.Harness{
		Name: "mycli",
		Request: func(in harness.Input) (harness.Command, error) {
			if err := (kit.Opening{Preset: "mycli", NoFork: "mycli cannot fork"}).Check(in); err != nil {
				return harness.Command{}, err
			}
			if err := kit.CheckExtraArgs("mycli", in.ExtraArgs, reserved.Check); err != nil {
				return harness.Command{}, err
			}
			args := append([]string{"--json"}, in.ExtraArgs...)
			return harness.Command{Path: "mycli", Args: append(args, "--", in.Prompt)}, nil
		},
		Events: func(line []byte) []harness.Event {
			o := kit.Parse(line)
			switch o.Str("type") {
			case "text":
				return []harness.Event{{Type: harness.EventMessage, Text: o.Str("text")}}
			case "error":
				d := kit.Details{}
				n, ok := o.Num("status")
				d.Num("status", n, ok)
				return []harness.Event{{Type: harness.EventFailure, Text: o.Str("message"), Details: d.Map()}}
			}
			return nil
		},
		Inactivity: kit.Inactivity,
	}
	_, err := h.Request(harness.Input{Prompt: "hi", ExtraArgs: []string{"--session=1"}})
	fmt.Println(err)
	fmt.Println(h.Events([]byte(`{"type":"error","message":"boom","status":"not a number"}`))[0].Details == nil)
	fmt.Println(h.Validate() == nil)
	// Output:
	// mycli: extra argument 1: --session is set by outpost: use Resume
	// true
	// true
}

func TestPassVariables(t *testing.T) {
	names := []string{"A_BASE_URL", "A_MODEL", "A_UNSET"}
	got, err := kit.PassVariables("p", harness.Vars{"A_BASE_URL": "https://x", "A_MODEL": "m", "OTHER": "o"}, names, "A_BASE_URL")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"A_BASE_URL": "https://x", "A_MODEL": "m"}, got); diff != "" {
		t.Errorf("passed (-want +got):\n%s", diff)
	}
	if got, err := kit.PassVariables("p", harness.Vars{}, names); got != nil || err != nil {
		t.Errorf("nothing set: %v, %v; want nil, nil", got, err)
	}
	_, err = kit.PassVariables("p", harness.Vars{"A_BASE_URL": "ftp://secret-host"}, names, "A_BASE_URL")
	if err == nil || !strings.Contains(err.Error(), "p: A_BASE_URL must be an http:// or https:// URL") || strings.Contains(err.Error(), "secret-host") {
		t.Errorf("a base URL that is not http(s): %v; want the preset and the variable named, never the value", err)
	}
}

// TestGuard: a decoder that panics on a line gives a decode_error notice
// naming the line; one that does not is passed through.
func TestGuard(t *testing.T) {
	got := kit.Guard([]byte("12345"), "codex", "output line", func() []harness.Event { panic("tripped") })
	want := []harness.Event{{Type: harness.EventNotice, Kind: "decode_error", Text: "codex: a 5-byte output line could not be decoded"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Guard of a panicking decoder (-want +got):\n%s", diff)
	}
	ok := []harness.Event{{Type: harness.EventMessage, Text: "hi"}}
	if diff := cmp.Diff(ok, kit.Guard(nil, "codex", "output line", func() []harness.Event { return ok })); diff != "" {
		t.Errorf("Guard of a decoder that returns (-want +got):\n%s", diff)
	}
}

// TestPromptFlag: a prompt up to MaxArgPrompt is --prompt=TEXT before the
// other arguments (a leading "-" stays the prompt's); a longer one is
// standard input, the stdin arguments in its place, the caller's slices
// untouched.
func TestPromptFlag(t *testing.T) {
	args, stdinArgs := []string{"--model", "m"}, []string{"--prompt= "}
	var cmd harness.Command
	kit.PromptFlag(&cmd, "-rf /", args, stdinArgs)
	if d := cmp.Diff([]string{"--prompt=-rf /", "--model", "m"}, cmd.Args); d != "" || cmd.Stdin != nil {
		t.Errorf("short prompt: stdin %q, args (-want +got):\n%s", cmd.Stdin, d)
	}
	long := strings.Repeat("x", kit.MaxArgPrompt+1)
	cmd = harness.Command{}
	kit.PromptFlag(&cmd, long, args, stdinArgs[:1:1])
	if d := cmp.Diff([]string{"--prompt= ", "--model", "m"}, cmd.Args); d != "" || string(cmd.Stdin) != long || stdinArgs[0] != "--prompt= " {
		t.Errorf("long prompt: %d bytes of stdin, args (-want +got):\n%s", len(cmd.Stdin), d)
	}
	cmd = harness.Command{}
	kit.PromptFlag(&cmd, long, args, nil)
	if d := cmp.Diff(args, cmd.Args); d != "" {
		t.Errorf("long prompt without stdin arguments (-want +got):\n%s", d)
	}
}
