package output

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExtract(t *testing.T) {
	tests := []struct {
		name, text string
		want       string
		src        Source
		err        error
	}{
		{name: "fence", text: "Here it is:\n```json\n{\"a\": 1}\n```\nDone.", want: `{"a": 1}`, src: SourceFence},
		{name: "last fence wins", text: "```json\n{\"a\":1}\n```\ntext\n```json\n{\"a\":2}\n```\n", want: `{"a":2}`, src: SourceFence},
		{name: "tilde fence", text: "~~~json\n[1,2]\n~~~", want: `[1,2]`, src: SourceFence},
		{name: "JSON upper-case info", text: "```JSON\n{\"b\":true}\n```", want: `{"b":true}`, src: SourceFence},
		{name: "nested fences are content", text: "````markdown\nexample:\n```json\n{\"inner\":1}\n```\n````\n```json\n{\"outer\":1}\n```", want: `{"outer":1}`, src: SourceFence},
		{name: "nested only: fallback finds the inner value", text: "````markdown\n```json\n{\"inner\":1}\n```\n````", want: `{"inner":1}`, src: SourceBalanced},
		{name: "longer closing fence", text: "```json\n{\"a\":1}\n`````\nafter", want: `{"a":1}`, src: SourceFence},
		{name: "shorter fence inside is content", text: "````json\n{\"s\":\"```\"}\n````", want: `{"s":"` + "```" + `"}`, src: SourceFence},
		{name: "unclosed fence runs to the end", text: "```json\n{\"a\":1}", want: `{"a":1}`, src: SourceFence},
		{name: "other languages ignored", text: "```go\nx := map[string]int{}\n```\nanswer: {\"ok\":true}", want: `{"ok":true}`, src: SourceBalanced},
		{name: "fence with invalid JSON is still the answer", text: "{\"good\":1}\n```json\n{bad}\n```", want: `{bad}`, src: SourceFence},
		{name: "whole text", text: "  \"just a string\"\n", want: `"just a string"`, src: SourceWhole},
		{name: "whole number", text: "42", want: `42`, src: SourceWhole},
		{name: "JSON in prose", text: `I looked at it. The answer is {"name": "x", "tags": ["a", "b"]} and that is all.`, want: `{"name": "x", "tags": ["a", "b"]}`, src: SourceBalanced},
		{name: "last of several in prose", text: `first {"v":1} then [1,2] finally {"v":3}.`, want: `{"v":3}`, src: SourceBalanced},
		{name: "brackets in strings", text: `x {"s":"a } ] [ {","n":[1,{"m":"}"}]} y`, want: `{"s":"a } ] [ {","n":[1,{"m":"}"}]}`, src: SourceBalanced},
		{name: "escaped quote in string", text: `{"s":"say \"hi\" }"}`, want: `{"s":"say \"hi\" }"}`, src: SourceWhole},
		{name: "prose brackets before the value", text: "see [1] and (note [unclosed\n\nResult: {\"a\":1}", want: `{"a":1}`, src: SourceBalanced},
		{name: "prose array with value inside", text: `[note: {"a":1}] end`, want: `{"a":1}`, src: SourceBalanced},
		{name: "invalid object reported when nothing is valid", text: "answer: {name: 'x'}", want: `{name: 'x'}`, src: SourceBalanced},
		{name: "valid wins over later invalid prose braces", text: "{\"a\":1} use {curly} braces", want: `{"a":1}`, src: SourceBalanced},
		{name: "inline backticks are not a fence", text: "```json {\"a\":1}``` and {\"b\":2}", want: `{"b":2}`, src: SourceBalanced},
		{name: "CRLF fences", text: "```json\r\n{\"a\":1}\r\n```\r\n", want: "{\"a\":1}\r", src: SourceFence},
		{name: "nothing", text: "no json here", err: ErrNoJSON},
		{name: "empty", text: "", err: ErrNoJSON},
		{name: "only unclosed", text: "{\"a\": [1, 2", err: ErrNoJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Extract(tt.text)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if string(got.Raw) != tt.want || got.Source != tt.src {
				t.Errorf("Extract = %q (%s), want %q (%s)", got.Raw, got.Source, tt.want, tt.src)
			}
		})
	}
}

func TestExtractInvalidUTF8(t *testing.T) {
	text := "prose \xff\xfe {\"name\": \"a\xffb\"} \xc3"
	x, err := Extract(text)
	if err != nil {
		t.Fatal(err)
	}
	v, compact, p := Decode(x.Raw)
	if p != nil {
		t.Fatalf("problem: %v", p)
	}
	if !json.Valid(compact) || !strings.Contains(string(compact), "\ufffd") {
		t.Errorf("compact = %q, want valid JSON with U+FFFD", compact)
	}
	if v.(map[string]any)["name"] == nil {
		t.Errorf("value = %v", v)
	}
	// Garbage of every byte never panics.
	var b []byte
	for i := 0; i < 4096; i++ {
		b = append(b, byte(i*7))
	}
	Extract(string(b))
	CheckProtocol(string(b))
	FirstParagraph(string(b), 100)
}

func TestExtractMegabytes(t *testing.T) {
	t.Run("prose then value", func(t *testing.T) {
		text := strings.Repeat("lorem ipsum [dolor] {sit} amet, ", 70_000) + "\n```json\n{\"ok\":true}\n```"
		got, err := Extract(text)
		if err != nil || string(got.Raw) != `{"ok":true}` {
			t.Fatalf("Extract = %q, %v", got.Raw, err)
		}
	})
	t.Run("hostile brackets stay bounded", func(t *testing.T) {
		text := strings.Repeat("[", 1<<20) + ` {"a":1}`
		got, err := Extract(text)
		if err != nil || string(got.Raw) != `{"a":1}` {
			t.Fatalf("Extract = %.40q, %v", got.Raw, err)
		}
	})
	t.Run("value over MaxValue is a problem", func(t *testing.T) {
		big := `{"data":"` + strings.Repeat("x", MaxValue) + `"}`
		a := MustCompile(`{"type":"object"}`).Check("```json\n" + big + "\n```")
		if a.OK() || len(a.Problems) != 1 || !strings.Contains(a.Problems[0].Message, "limit") {
			t.Fatalf("Check = %+v", a.Problems)
		}
	})
	t.Run("text over MaxText keeps its tail", func(t *testing.T) {
		text := `{"head":1}` + strings.Repeat(" ", MaxText) + `{"tail":1}`
		got, err := Extract(text)
		if err != nil || string(got.Raw) != `{"tail":1}` {
			t.Fatalf("Extract = %q, %v", got.Raw, err)
		}
	})
	t.Run("megabytes of JSON within bounds", func(t *testing.T) {
		items := make([]string, 30_000)
		for i := range items {
			items[i] = `{"id":"x"}`
		}
		text := "Result:\n[" + strings.Join(items, ",") + "]"
		a := MustCompile(`{"type":"array","items":{"type":"object","required":["id"]}}`).Check(text)
		if !a.OK() {
			t.Fatalf("Check = %v", a.Problems)
		}
	})
}

func TestFirstParagraph(t *testing.T) {
	tests := []struct{ text, want string }{
		{"\n\nFirst line\nsecond line\n\nNext paragraph", "First line second line"},
		{"```\ncode\n```\nAfter code\n\nmore", "After code"},
		{"", ""},
		{strings.Repeat("é", 10), "éé…"},
	}
	for _, tt := range tests {
		if got := FirstParagraph(tt.text, 5); tt.want != "éé…" && FirstParagraph(tt.text, 100) != tt.want {
			t.Errorf("FirstParagraph(%q) = %q, want %q", tt.text, FirstParagraph(tt.text, 100), tt.want)
		} else if tt.want == "éé…" && got != tt.want {
			t.Errorf("bounded FirstParagraph = %q, want %q", got, tt.want)
		}
	}
}

func TestCheckProtocol(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		want     *Outcome
		problems bool
	}{
		{name: "result", text: "Did it.\n\n```json\n{\"result\": {\"summary\": \"fixed the bug\", \"changedFiles\": [\"a.go\"]}}\n```", want: &Outcome{Kind: KindResult, Summary: "fixed the bug", ClaimedChangedFiles: []string{"a.go"}}},
		{name: "handoff untagged fence", text: "Not mine.\n```\n{\"handoff\": {\"to\": \"reviewer\", \"task\": \"review\", \"context\": \"see a.go\"}}\n```", want: &Outcome{Kind: KindHandoff, To: "reviewer", Task: "review", Context: "see a.go"}},
		{name: "handoff claims", text: "```json\n{\"handoff\": {\"to\": \"r\", \"task\": \"t\", \"changedFiles\": [\"b.go\", \"c/\"]}}\n```", want: &Outcome{Kind: KindHandoff, To: "r", Task: "t", ClaimedChangedFiles: []string{"b.go", "c/"}}},
		{name: "handoff claims not strings", text: "```json\n{\"handoff\": {\"to\": \"r\", \"task\": \"t\", \"changedFiles\": [1]}}\n```", problems: true},
		{name: "last block wins", text: "```json\n{\"handoff\":{\"to\":\"a\",\"task\":\"b\"}}\n```\n```json\n{\"result\":{\"summary\":\"s\"}}\n```", want: &Outcome{Kind: KindResult, Summary: "s"}},
		{name: "bash block is not the protocol", text: "All done here.\n\n```bash\nls\n```", want: &Outcome{Kind: KindResult, Summary: "All done here.", Fallback: true}},
		{name: "unfenced JSON is prose", text: `Done. {"result": {"summary": "ok"}}`, want: &Outcome{Kind: KindResult, Summary: `Done. {"result": {"summary": "ok"}}`, Fallback: true}},
		{name: "fallback", text: "I changed the README.\nIt reads better.\n\nDetails follow.", want: &Outcome{Kind: KindResult, Summary: "I changed the README. It reads better.", Fallback: true, ClaimedChangedFiles: []string{"README"}}},
		{name: "fallback scrapes paths", text: "Edited `src/parser.go` and ./main.go:12:3.\n\nAlso main.go, docs/ (see https://example.com/x).", want: &Outcome{Kind: KindResult,
			Summary: "Edited `src/parser.go` and ./main.go:12:3.", Fallback: true, ClaimedChangedFiles: []string{"src/parser.go", "main.go", "docs/"}}},
		{name: "malformed block", text: "```json\n{\"result\": {\"summary\": 3}}\n```", problems: true},
		{name: "both kinds", text: "```json\n{\"result\": {\"summary\": \"a\"}, \"handoff\": {\"to\": \"b\", \"task\": \"c\"}}\n```", problems: true},
		{name: "not JSON", text: "```json\n{result: 1}\n```", problems: true},
		{name: "empty handoff target", text: "```json\n{\"handoff\": {\"to\": \"\", \"task\": \"c\"}}\n```", problems: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := CheckProtocol(tt.text)
			if tt.problems {
				if a.Outcome != nil || len(a.Problems) == 0 {
					t.Fatalf("CheckProtocol = %+v, want problems", a)
				}
				if msg := ProtocolRepairMessage(a.Problems); !strings.Contains(msg, a.Problems[0].Message) {
					t.Errorf("repair message %q lacks %q", msg, a.Problems[0].Message)
				}
				return
			}
			if len(a.Problems) > 0 {
				t.Fatalf("problems: %v", a.Problems)
			}
			if d := cmp.Diff(tt.want, a.Outcome); d != "" {
				t.Errorf("outcome (-want +got):\n%s", d)
			}
		})
	}
}

func TestMentionedPaths(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"none", "All good, nothing to report. Version 1.26 works, e.g. here.", nil},
		{"slash or extension", "Changed internal/shim/shim.go, go.mod and Makefile; left notes.", []string{"internal/shim/shim.go", "go.mod", "Makefile"}},
		{"marks around", "**`a.ts`** (b.py) [c/d] <e.json> 'f.md' \"g.yaml\" h.toml: i.rs!", []string{"a.ts", "b.py", "c/d", "e.json", "f.md", "g.yaml", "h.toml", "i.rs"}},
		{"line and column", "see x.go:12 and y.go:3:9.", []string{"x.go", "y.go"}},
		{"deduplicated", "./a.go a.go ./a.go a.go:1", []string{"a.go"}},
		{"absolute kept", "wrote /tmp/out.txt and ~/notes", []string{"/tmp/out.txt", "~/notes"}},
		{"not paths", "https://example.com/x.go a=b/c.go / ./ ... v1.2.3 .gitignore", nil},
		{"exist-agnostic", "no/such/file.go", []string{"no/such/file.go"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, MentionedPaths(tt.text)); d != "" {
				t.Errorf("MentionedPaths(%q) (-want +got):\n%s", tt.text, d)
			}
		})
	}
	many := strings.Repeat("x/", 1) + "0"
	for i := 1; i < 3*MaxMentionedPaths; i++ {
		many += fmt.Sprintf(" f%d.go", i)
	}
	if got := MentionedPaths(many); len(got) != MaxMentionedPaths || got[0] != "x/0" {
		t.Errorf("bounded: %d paths, first %q", len(got), got[0])
	}
}

// An outcome's changed files are changed_files on the wire, and for one
// release changedFiles too; both names are read back.
func TestOutcomeChangedFilesNames(t *testing.T) {
	b, err := json.Marshal(&Outcome{Kind: KindResult, Summary: "s", ChangedFiles: []string{"a.go"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"result","summary":"s","changed_files":["a.go"],"changedFiles":["a.go"]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	for _, in := range []string{`{"kind":"result","changed_files":["a.go"]}`, `{"kind":"result","changedFiles":["a.go"]}`} {
		var o Outcome
		if err := json.Unmarshal([]byte(in), &o); err != nil {
			t.Fatal(err)
		}
		if len(o.ChangedFiles) != 1 || o.ChangedFiles[0] != "a.go" {
			t.Errorf("%s: read %+v", in, o)
		}
	}
	b, _ = json.Marshal(&Outcome{Kind: KindHandoff, To: "r", Task: "t"})
	if strings.Contains(string(b), "hanged") {
		t.Errorf("an outcome without changed files writes none: %s", b)
	}
}
