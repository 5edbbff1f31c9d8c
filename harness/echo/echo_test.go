package echo

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
)

var seeds = []string{
	`{"type":"init","session":"0f8fad5b-d9cb-469f-a165-70867728950e","model":"echo-1","turn":1}`,
	`{"type":"retry","attempt":1,"text":"rate limited (429), retrying in 10ms (attempt 1 of 3)"}`,
	`{"type":"tool_call","id":"tool-1","name":"shell","input":{"command":"echo hi"}}`,
	`{"type":"tool_result","id":"tool-1","output":"hi\n"}`,
	`{"type":"delta","id":"m1","text":"step 1 "}`,
	`{"type":"steer","mode":"injected","text":"stop"}`,
	`{"type":"text","id":"m1","text":"echo: hello (turn 1)"}`,
	`{"type":"done","text":"echo: hello (turn 1)","usage":{"input":1,"output":4,"cache_read":0}}`,
	`{"type":"tool_result","id":"tool-2","output":"../x is outside the working directory","error":true}`,
	`{"type":"denied","id":"tool-2","name":"shell","text":"echo: #write=../x refused: ../x is outside the working directory"}`,
	`{"type":"text","text":`,
	"not json",
	"{\"type\":\"text\",\"text\":\"\xff\xfe\"}",
	`{"type":"done","usage":{"input":"x"}}`,
	`{"type":"tool_call","input":[1,2}`,
	`null`, `[]`, `{}`, `""`,
}

func TestEvents(t *testing.T) {
	want := []harness.EventType{harness.EventSession, harness.EventNotice, harness.EventToolCall, harness.EventToolResult,
		harness.EventMessage, harness.EventNotice, harness.EventMessage, harness.EventFinished, harness.EventToolResult, harness.EventFailure, harness.EventMessage}
	var got []harness.EventType
	for _, s := range seeds {
		for _, e := range Events([]byte(s)) {
			got = append(got, e.Type)
		}
	}
	if strings.Join(types(got), ",") != strings.Join(types(want), ",") {
		t.Errorf("types = %v, want %v", got, want)
	}
	done := Events([]byte(seeds[7]))[0]
	if done.Usage == nil || done.Usage.InputTokens != 1 || done.Usage.OutputTokens != 4 || !done.Usage.Complete {
		t.Errorf("usage %+v", done.Usage)
	}
	if r := Events([]byte(seeds[8])); len(r) != 1 || !r[0].Tool.Error {
		t.Errorf("a refused tool call's result is not an error: %+v", r)
	}
	if d := Events([]byte(seeds[9])); len(d) != 1 || d[0].Kind != "permission_denied" || !strings.Contains(d[0].Text, "refused") {
		t.Errorf("denied: %+v", d)
	}
}

func types(ts []harness.EventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

func TestClassification(t *testing.T) {
	cases := []struct {
		text               string
		quota, unavailable bool
	}{
		{"echo: usage limit reached for this key; it resets at 2026-11-29T21:00:00Z", true, false},
		{"echo: model service unavailable: 503 overloaded (connection reset by peer)", false, true},
		{"echo: rate limited (429), retrying in 10ms (attempt 1 of 3)", false, false},
		{"echo: simulated crash", false, false},
	}
	for _, c := range cases {
		if Quota(c.text) != c.quota || Unavailable(c.text) != c.unavailable {
			t.Errorf("%q: quota %v unavailable %v", c.text, Quota(c.text), Unavailable(c.text))
		}
	}
	d := quotaDetails(cases[0].text)
	if d["resets_at"] != "2026-11-29T21:00:00Z" {
		t.Errorf("details %v", d)
	}
}

func TestHarnessValidates(t *testing.T) {
	if err := Harness().Validate(); err != nil {
		t.Fatal(err)
	}
}

// FuzzEvents: no input makes the decoder panic, and every event it returns
// serializes to valid JSON.
func FuzzEvents(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add(bytes.Repeat([]byte("x"), 1<<16))
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, e := range Events(line) {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatalf("event does not serialize: %v", err)
			}
			if !utf8.Valid(b) {
				t.Fatalf("invalid UTF-8 in %q", b)
			}
		}
	})
}

// TestExtraArgs: the preset refuses the flags outpost controls, in every
// form the agent's flag parser takes, and "--"; the agent reads what
// follows "--" as the prompt only.
func TestExtraArgs(t *testing.T) {
	refused := map[string]string{
		"--model=x": "--model is set by outpost: use the agent's model", "-model": "--model is set by outpost",
		"--resume": "use Resume", "-resume=abc": "use Resume", "--fork": "use Fork", "---fork": "use Fork",
		"--live": "--live is set by outpost", "-h": "-h is set by outpost", "--help": "--help is set by outpost",
		"--": `"--" is placed by outpost`, "x\x00": "NUL",
	}
	for arg, want := range refused {
		_, err := request(harness.Input{Prompt: "hi", ExtraArgs: []string{"--ok", arg}})
		if err == nil || !strings.Contains(err.Error(), "echo: extra argument 2: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", arg, err, want)
		}
	}
	cmd, err := request(harness.Input{Prompt: "-", Model: "m", ExtraArgs: []string{"--some-flag", "value", "-"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	if code := Main(cmd.Args[1:], strings.NewReader("from stdin"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := `"text":"echo: - (turn 1)"`; !strings.Contains(out.String(), want) {
		t.Errorf("the prompt after -- is not the literal %q:\n%s", "-", out.String())
	}
	for _, args := range [][]string{{"--model", "m", "--", "--resume", "x", "#args"}, {"--x", "v", "--", "#args", "--fork"}} {
		out.Reset()
		Main(args, strings.NewReader(""), &out, &errb)
		prompt := strings.Join(args[slices.Index(args, "--")+1:], " ")
		if !strings.Contains(out.String(), `"text":"echo: `+prompt+` (turn 1)`) {
			t.Errorf("%q: the words after -- are not the prompt:\n%s", args, out.String())
		}
	}
	if !strings.Contains(out.String(), `args: --x v`) {
		t.Errorf("unknown flags and their values before -- are not passed through:\n%s", out.String())
	}
}

// TestHistory reads a session file's exchange as events: the user's
// messages (kind user) and the answers, in order; a transcript without
// the file gives none.
func TestHistory(t *testing.T) {
	file := `{"role":"meta","id":"n1"}` + "\n" + `{"role":"user","text":"hi"}` + "\n" + `{"role":"assistant","text":"echo: hi (turn 1)"}` + "\nnot json\n" + `{"role":"user","text":"again"}` + "\n"
	got := History(harness.Transcript{Native: "n1", Files: map[string][]byte{".echo/sessions/n1.jsonl": []byte(file)}})
	want := []harness.Event{
		{Type: harness.EventMessage, Kind: harness.KindUser, Text: "hi"},
		{Type: harness.EventMessage, Text: "echo: hi (turn 1)"},
		{Type: harness.EventMessage, Kind: harness.KindUser, Text: "again"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("History = %+v, want %+v", got, want)
	}
	if got := History(harness.Transcript{Native: "n2", Files: map[string][]byte{".echo/sessions/n1.jsonl": []byte(file)}}); got != nil {
		t.Errorf("History of another session = %+v", got)
	}
}
