package declarative_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/echo"
)

// The JSON-lines stand-in is the echo agent: testdata/echo.json describes
// its JSON lines through field paths, and must decode them exactly as the
// echo agent's Go preset does.
func echoFile(t *testing.T) *harness.Harness {
	t.Helper()
	h, err := declarative.Load("testdata/echo.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestJSONLinesStandIn(t *testing.T) {
	h := echoFile(t)
	if h.Name != "echo-file" || !h.Resumes() || !h.Forks() || !h.Captures() || !h.RequiresFinishedEvent {
		t.Fatalf("flags: %+v", h)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	run := func(in harness.Input) ([]byte, int) {
		t.Helper()
		cmd, err := h.Request(in)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Args[0] != echo.Subcommand {
			t.Fatalf("args %q", cmd.Args)
		}
		var out, errb bytes.Buffer
		code := echo.Main(cmd.Args[1:], strings.NewReader(""), &out, &errb)
		return out.Bytes(), code
	}
	ignore := cmpopts.IgnoreFields(harness.Event{}, "Details", "Raw", "Stop")
	var first string
	for _, c := range []struct {
		name string
		in   harness.Input
	}{
		{"text", harness.Input{Prompt: "hello", Model: "echo-2"}},
		{"slow", harness.Input{Prompt: "x #slow=3"}},
		{"retry", harness.Input{Prompt: "x #retry"}},
		{"resume", harness.Input{Prompt: "again"}},
		{"fork", harness.Input{Prompt: "forked", Fork: true}},
		{"quota", harness.Input{Prompt: "x #quota"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "resume" || c.name == "fork" {
				c.in.Conversation = first
			}
			out, code := run(c.in)
			want := decodeWith(echo.Events, out)
			got := decode(h, out)
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Errorf("the file decodes differently from the Go preset (-go +file):\n%s", diff)
			}
			if c.name == "text" {
				first = got[0].Session
				if first == "" {
					t.Fatal("no session")
				}
				_, u := finalOf(got)
				if u == nil || !u.Complete || u.InputTokens == 0 {
					t.Errorf("usage %+v", u)
				}
			}
			if c.name == "fork" && (got[0].Session == "" || got[0].Session == first) {
				t.Errorf("fork session %q", got[0].Session)
			}
			if c.name == "quota" && (code == 0) {
				t.Errorf("exit %d", code)
			}
		})
	}
	if !h.Quota("echo: usage limit reached for this key") || h.Quota("rate limited (429), retrying in 10ms") {
		t.Error("quota classification")
	}
	// A long text is matched on its start and its end (8 KiB each): a
	// message there is found, one buried in the middle of 1 MiB is not
	// looked for.
	pad := strings.Repeat("x", 1<<20)
	for text, want := range map[string]bool{
		"echo: usage limit reached for this key " + pad: true,
		pad + " echo: usage limit reached for this key": true,
		pad + " usage limit reached " + pad:             false,
	} {
		if got := h.Quota(text); got != want {
			t.Errorf("Quota of a %d-byte text with the message at %d = %v, want %v", len(text), strings.Index(text, "usage"), got, want)
		}
	}
	if !h.Storage.Match(first+".jsonl", first) || h.Storage.Match(first+".jsonl", "other") || h.Storage.Match("x.jsonl", "*") {
		t.Error("storage match")
	}
}

func decodeWith(dec func([]byte) []harness.Event, out []byte) []harness.Event {
	var evs []harness.Event
	for _, l := range bytes.Split(out, []byte("\n")) {
		if len(l) > 0 {
			evs = append(evs, dec(l)...)
		}
	}
	return evs
}

func TestPaths(t *testing.T) {
	h, err := declarative.Parse("t", []byte(`{"kind":"cli","name":"t","program":"p","args":["{prompt}"],
	  "output":{"format":"jsonl","events":[
	    {"when":{"type":"assistant","message.role":"assistant"},"event":"message","text":"message.content.*.text"},
	    {"when":{"n":1},"event":"usage","usage":{"input":"u.0","output":"u.-1"}},
	    {"when":{"type":"x"},"event":"ignore"},
	    {"event":"notice","text":"type"}]}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		line string
		want []harness.Event
	}{
		{`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use"},{"text":"b"}]}}`,
			[]harness.Event{{Type: harness.EventMessage, Text: "ab"}}},
		{`{"n":1,"u":[3,"4",5]}`, []harness.Event{{Type: harness.EventUsage, Usage: &harness.Usage{InputTokens: 3, OutputTokens: 5, Complete: true}}}},
		{`{"n":1,"u":[3]}`, []harness.Event{{Type: harness.EventUsage, Usage: &harness.Usage{InputTokens: 3, OutputTokens: 3, Complete: true}}}},
		{`{"n":1,"u":[-3,"x"]}`, []harness.Event{{Type: harness.EventUsage, Usage: &harness.Usage{}}}},
		{`{"type":"x"}`, nil},
		{`{"type":"other"}`, []harness.Event{{Type: harness.EventNotice, Text: "other"}}},
		{"{\"type\":\"\xff\"}", []harness.Event{{Type: harness.EventNotice, Text: "\uFFFD"}}},
		{`not json`, nil}, {`[1]`, nil}, {``, nil}, {`{"type":`, nil}, {`{} {}`, nil},
	} {
		if diff := cmp.Diff(c.want, h.Events([]byte(c.line))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.line, diff)
		}
	}
}
