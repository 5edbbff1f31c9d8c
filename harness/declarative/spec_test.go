package declarative_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness/declarative"
)

// valid is a file that sets every field; each bad-file case breaks one.
const valid = `{
  "kind": "cli", "name": "tool", "version": "1.0", "program": "tool",
  "args": ["run", "{model_args}", "{session_args}", "{extra_args}", "--", "{prompt}"],
  "prompt": "argument",
  "model_args": ["--model", "{model}"],
  "session": "output",
  "resume_args": ["--resume", "{session}"],
  "fork": {"args": ["--resume", "{parent}", "--fork"]},
  "reserved_args": ["--danger"],
  "env": {"TOOL_NO_COLOR": "1"},
  "variables": {"TOOL_MODE": "batch"},
  "credentials": {"variables": ["TOOL_KEY"], "host_files": [{"source": ".tool/auth.json", "target": ".tool/auth.json", "optional": true}], "login": [["tool", "login"]]},
  "output": {"format": "jsonl", "events": [
    {"when": {"type": "start"}, "event": "session", "session": "id"},
    {"when": {"type": "text"}, "event": "message", "text": "text"},
    {"when": {"type": "end"}, "event": "finished", "text": "result", "usage": {"input": "usage.in", "output": "usage.out"}}
  ], "require_finished": true},
  "quota": ["quota"], "unavailable": ["unavailable"], "misconfigured": ["bad key"], "retry": ["retrying"],
  "storage": {"roots": [".tool/sessions"], "files": ["{session}.jsonl"]},
  "capture": true, "resumable": true, "forkable": true,
  "usage": "events", "bootstrap": "tool", "inactivity": "10m", "retry_bound": "3m"
}`

func TestValidFile(t *testing.T) {
	h, err := declarative.Parse("valid.json", []byte(valid), &declarative.Options{Bootstrap: func(n string) bool { return n == "tool" }})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Captures() || !h.Resumes() || !h.Forks() || h.Bootstrap != "tool" || h.Inactivity.Minutes() != 10 {
		t.Errorf("compiled %+v", h)
	}
}

// set returns valid with the field at path (dot-separated, numeric
// segments index arrays) replaced by v, or deleted when v is del.
type deleted struct{}

var del = deleted{}

func set(t *testing.T, path string, v any) []byte {
	t.Helper()
	var m any
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(path, ".")
	cur := m
	for i, s := range segs {
		last := i == len(segs)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if v == del {
					delete(c, s)
				} else {
					c[s] = v
				}
			} else {
				if c[s] == nil {
					c[s] = map[string]any{}
				}
				cur = c[s]
			}
		case []any:
			n := 0
			for _, ch := range s {
				n = n*10 + int(ch-'0')
			}
			if last {
				c[n] = v
			} else {
				cur = c[n]
			}
		default:
			t.Fatalf("path %s: %T", path, cur)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadFile(t *testing.T) {
	text := map[string]any{"format": "text"}
	cases := []struct {
		name  string
		file  func(t *testing.T) []byte
		field string // the message must name it
	}{
		{"kind missing", func(t *testing.T) []byte { return set(t, "kind", del) }, "kind"},
		{"kind unknown", func(t *testing.T) []byte { return set(t, "kind", "api") }, "kind"},
		{"name", func(t *testing.T) []byte { return set(t, "name", "Bad Name") }, "name"},
		{"version type", func(t *testing.T) []byte { return set(t, "version", 1) }, "version"},
		{"program missing", func(t *testing.T) []byte { return set(t, "program", del) }, "program"},
		{"program flag", func(t *testing.T) []byte { return set(t, "program", "-x") }, "program"},
		{"args placeholder", func(t *testing.T) []byte { return set(t, "args.0", "{nope}") }, "args[0]"},
		{"args brace", func(t *testing.T) []byte { return set(t, "args.0", "{") }, "args[0]"},
		{"args splice twice", func(t *testing.T) []byte { return set(t, "args.0", "{extra_args}") }, "args[3]"},
		{"args no prompt", func(t *testing.T) []byte { return set(t, "args.5", "x") }, "args"},
		{"args type", func(t *testing.T) []byte { return set(t, "args", "run") }, "args"},
		{"prompt", func(t *testing.T) []byte { return set(t, "prompt", "pipe") }, "prompt"},
		{"prompt file", func(t *testing.T) []byte { return set(t, "prompt", "file") }, "args[5]"},
		{"model_args", func(t *testing.T) []byte { return set(t, "model_args", []any{"--model"}) }, "model_args"},
		{"model_args splice", func(t *testing.T) []byte { return set(t, "model_args", []any{"{extra_args}"}) }, "model_args[0]"},
		{"session", func(t *testing.T) []byte { return set(t, "session", "auto") }, "session"},
		{"new_args generated", func(t *testing.T) []byte { return set(t, "session", "generated") }, "new_args"},
		{"new_args placeholder", func(t *testing.T) []byte { return set(t, "new_args", []any{"{prompt}"}) }, "new_args[0]"},
		{"resume_args", func(t *testing.T) []byte { return set(t, "resume_args", []any{"--resume"}) }, "resume_args"},
		{"fork both", func(t *testing.T) []byte { return set(t, "fork.command", []any{"tool", "fork", "{parent}"}) }, "fork"},
		{"fork neither", func(t *testing.T) []byte { return set(t, "fork", map[string]any{}) }, "fork"},
		{"fork args", func(t *testing.T) []byte { return set(t, "fork.args", []any{"--fork"}) }, "fork.args"},
		{"fork command program", func(t *testing.T) []byte {
			return set(t, "fork", map[string]any{"command": []any{"{parent}"}})
		}, "fork.command[0]"},
		{"reserved_args", func(t *testing.T) []byte { return set(t, "reserved_args", []any{"danger"}) }, "reserved_args[0]"},
		{"schema_args", func(t *testing.T) []byte { return set(t, "schema_args", []any{"--schema"}) }, "schema_args"},
		{"schema_args placeholder", func(t *testing.T) []byte { return set(t, "schema_args", []any{"{session}"}) }, "schema_args[0]"},
		{"files path", func(t *testing.T) []byte {
			return set(t, "files", []any{map[string]any{"path": "../x", "content": "y"}})
		}, "files[0].path"},
		{"files content", func(t *testing.T) []byte { return set(t, "files", []any{map[string]any{"path": "x"}}) }, "files[0].content"},
		{"files merge", func(t *testing.T) []byte {
			return set(t, "files", []any{map[string]any{"path": "x", "content": "y", "merge": "yaml"}})
		}, "files[0].merge"},
		{"pass_variables", func(t *testing.T) []byte { return set(t, "pass_variables", []any{"A B"}) }, "pass_variables[0]"},
		{"endpoint api", func(t *testing.T) []byte {
			return set(t, "endpoint", map[string]any{"api": "soap", "secret": "K", "base_url": "U"})
		}, "endpoint.api"},
		{"endpoint base", func(t *testing.T) []byte { return set(t, "endpoint", map[string]any{"api": "gemini", "secret": "K"}) }, "endpoint"},
		{"resume_files path", func(t *testing.T) []byte {
			return set(t, "resume_files", []any{map[string]any{"path": "{workdir}/x", "content": "y"}})
		}, "resume_files[0].path"},
		{"resume_files content", func(t *testing.T) []byte {
			return set(t, "resume_files", []any{map[string]any{"path": "x", "content": map[string]any{"a": "{prompt}"}}})
		}, "resume_files[0].content"},
		{"resume_prepare placeholder", func(t *testing.T) []byte {
			return set(t, "resume_prepare", []any{[]any{"db", "{prompt}"}})
		}, "resume_prepare[0][1]"},
		{"resume_prepare program", func(t *testing.T) []byte {
			return set(t, "resume_prepare", []any{[]any{"{workdir}", "x"}})
		}, "resume_prepare[0][0]"},
		{"resume_prepare empty", func(t *testing.T) []byte { return set(t, "resume_prepare", []any{[]any{}}) }, "resume_prepare[0]"},
		{"each_when without each", func(t *testing.T) []byte {
			return set(t, "output.events.1.each_when", map[string]any{"type": "text"})
		}, "output.events[1].each_when"},
		{"tool path on a message", func(t *testing.T) []byte { return set(t, "output.events.1.tool", "name") }, "output.events[1].event"},
		{"tool_call without tool", func(t *testing.T) []byte { return set(t, "output.events.1.event", "tool_call") }, "output.events[1].tool"},
		{"sum without usage", func(t *testing.T) []byte { return set(t, "output.events.1.sum", true) }, "output.events[1].sum"},
		{"storage workdir", func(t *testing.T) []byte { return set(t, "storage.workdir", "hash") }, "storage.workdir"},
		{"storage files without session", func(t *testing.T) []byte { return set(t, "storage.files", []any{"db.sqlite"}) }, "storage.files[0]"},

		{"env", func(t *testing.T) []byte { return set(t, "env", map[string]any{"1X": "y"}) }, "env"},
		{"variables", func(t *testing.T) []byte { return set(t, "variables", map[string]any{"A-B": "y"}) }, "variables"},
		{"credentials.variables", func(t *testing.T) []byte { return set(t, "credentials.variables", []any{"a b"}) }, "credentials.variables[0]"},
		{"credentials.required", func(t *testing.T) []byte { return set(t, "credentials.required", true) }, "credentials.required"},
		{"credentials.host_files source", func(t *testing.T) []byte { return set(t, "credentials.host_files.0.source", "../etc/passwd") }, "credentials.host_files[0].source"},
		{"credentials.host_files target", func(t *testing.T) []byte { return set(t, "credentials.host_files.0.target", "/abs") }, "credentials.host_files[0].target"},
		{"credentials.login", func(t *testing.T) []byte { return set(t, "credentials.login", []any{[]any{}}) }, "credentials.login[0]"},
		{"output missing", func(t *testing.T) []byte { return set(t, "output", del) }, "output"},
		{"output.format missing", func(t *testing.T) []byte { return set(t, "output.format", del) }, "output.format"},
		{"output.format", func(t *testing.T) []byte { return set(t, "output.format", "xml") }, "output.format"},
		{"output.events empty", func(t *testing.T) []byte { return set(t, "output.events", []any{}) }, "output.events"},
		{"output.events event", func(t *testing.T) []byte { return set(t, "output.events.1.event", "shout") }, "output.events[1].event"},
		{"output.events text", func(t *testing.T) []byte { return set(t, "output.events.1.text", del) }, "output.events[1].text"},
		{"output.events text path", func(t *testing.T) []byte { return set(t, "output.events.1.text", "a..b") }, "output.events[1].text"},
		{"output.events session", func(t *testing.T) []byte { return set(t, "output.events.0.session", del) }, "output.events[0].session"},
		{"output.events when", func(t *testing.T) []byte { return set(t, "output.events.0.when", map[string]any{"": "x"}) }, "output.events[0].when"},
		{"output.events usage", func(t *testing.T) []byte { return set(t, "output.events.2.usage", map[string]any{"cache_read": "c"}) }, "output.events[2].usage"},
		{"output.events kind", func(t *testing.T) []byte { return set(t, "output.events.1.kind", "retry") }, "output.events[1].kind"},
		{"output.events unknown", func(t *testing.T) []byte { return set(t, "output.events.1.txt", "text") }, "output.events[1].txt"},
		{"output.require_finished", func(t *testing.T) []byte { return set(t, "output.events.2.event", "message") }, "output.require_finished"},
		{"output.ignore in jsonl", func(t *testing.T) []byte { return set(t, "output.ignore", []any{"x"}) }, "output.ignore"},
		{"output.events in text", func(t *testing.T) []byte { return set(t, "output.format", "text") }, "output.events"},
		{"output.usage_line", func(t *testing.T) []byte {
			return set(t, "output", map[string]any{"format": "text", "usage_line": "(?P<tokens>\\d+)"})
		}, "output.usage_line"},
		{"output.failure", func(t *testing.T) []byte {
			return set(t, "output", map[string]any{"format": "text", "failure": []any{"("}})
		}, "output.failure[0]"},
		{"session output with text", func(t *testing.T) []byte { return set(t, "output", text) }, "session"},
		{"quota", func(t *testing.T) []byte { return set(t, "quota", []any{"("}) }, "quota[0]"},
		{"unavailable", func(t *testing.T) []byte { return set(t, "unavailable", []any{"[z-a]"}) }, "unavailable[0]"},
		{"misconfigured", func(t *testing.T) []byte { return set(t, "misconfigured", []any{""}) }, "misconfigured[0]"},
		{"retry", func(t *testing.T) []byte { return set(t, "retry", []any{"a**"}) }, "retry[0]"},
		{"storage.roots", func(t *testing.T) []byte { return set(t, "storage.roots", []any{"../x"}) }, "storage.roots[0]"},
		{"storage.roots missing", func(t *testing.T) []byte { return set(t, "storage.roots", del) }, "storage.roots"},
		{"storage.files session", func(t *testing.T) []byte { return set(t, "storage.files", []any{"x.jsonl"}) }, "storage.files[0]"},
		{"storage.files pattern", func(t *testing.T) []byte { return set(t, "storage.files", []any{"[{session}"}) }, "storage.files[0]"},
		{"capture", func(t *testing.T) []byte { return set(t, "storage", del) }, "resumable"},
		{"capture without storage", func(t *testing.T) []byte {
			b := set(t, "storage", del)
			var m map[string]any
			json.Unmarshal(b, &m)
			delete(m, "resumable")
			delete(m, "forkable")
			b, _ = json.Marshal(m)
			return b
		}, "capture"},
		{"resumable", func(t *testing.T) []byte { return set(t, "resume_args", del) }, "resumable"},
		{"forkable", func(t *testing.T) []byte { return set(t, "fork", del) }, "forkable"},
		{"usage", func(t *testing.T) []byte { return set(t, "usage", "session") }, "usage"},
		{"bootstrap", func(t *testing.T) []byte { return set(t, "bootstrap", "nope") }, "bootstrap"},
		{"inactivity", func(t *testing.T) []byte { return set(t, "inactivity", "soon") }, "inactivity"},
		{"retry_bound", func(t *testing.T) []byte { return set(t, "retry_bound", "0s") }, "retry_bound"},
		{"unknown field", func(t *testing.T) []byte { return set(t, "progam", "x") }, "progam"},
		{"capture type", func(t *testing.T) []byte { return set(t, "capture", "yes") }, "capture"},
	}
	opts := &declarative.Options{Bootstrap: func(n string) bool { return n == "tool" }}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := declarative.Parse("tool.json", c.file(t), opts)
			if err == nil {
				t.Fatal("accepted")
			}
			if outpost.CodeOf(err) != outpost.Configuration {
				t.Errorf("code %s, want configuration: %v", outpost.CodeOf(err), err)
			}
			if !strings.Contains(err.Error(), "field "+c.field+":") {
				t.Errorf("error does not name field %s: %v", c.field, err)
			}
			if !strings.Contains(err.Error(), "tool.json") {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
	for name, data := range map[string]string{
		"syntax":   `{"kind": "cli",`,
		"trailing": valid + ` {}`,
		"empty":    ``,
		"array":    `[]`,
		"huge":     `{"name": "` + strings.Repeat("x", declarative.MaxFileSize) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := declarative.Parse("tool.json", []byte(data), opts)
			if outpost.CodeOf(err) != outpost.Configuration {
				t.Errorf("code %s: %v", outpost.CodeOf(err), err)
			}
		})
	}
}

func TestLoadAndFind(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "my-tool.json")
	b := set(t, "name", del)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := declarative.Load(p, nil)
	if err != nil || h.Name != "my-tool" {
		t.Fatalf("Load: %v %v", h, err)
	}
	h, ok, err := declarative.Find(dir, "my-tool", nil)
	if err != nil || !ok || h.Name != "my-tool" {
		t.Fatalf("Find: %v %v %v", h, ok, err)
	}
	if _, ok, err := declarative.Find(dir, "missing", nil); ok || err != nil {
		t.Errorf("Find of a missing file: %v %v", ok, err)
	}
	if _, ok, _ := declarative.Find(dir, "../my-tool", nil); ok {
		t.Error("Find followed a path")
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), set(t, "name", "renamed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := declarative.Find(dir, "other", nil); outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "field name:") {
		t.Errorf("a file whose name is not its own: %v", err)
	}
	if got := declarative.List(dir); len(got) != 2 || got[0] != "my-tool" || got[1] != "other" {
		t.Errorf("List %v", got)
	}
	_, err = declarative.Load(filepath.Join(dir, "nope.json"), nil)
	if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	for in, want := range map[string]string{"/x": "/x/outpost/agents", "": "/h/.config/outpost/agents", "rel": "/h/.config/outpost/agents"} {
		got := declarative.Dir(func(k string) string {
			return map[string]string{"XDG_CONFIG_HOME": in, "HOME": "/h"}[k]
		})
		if got != want {
			t.Errorf("Dir(XDG_CONFIG_HOME=%q) = %q, want %q", in, got, want)
		}
	}
	for agent, want := range map[string]bool{"./x.json": true, "x.json": true, "/a/b": true, "claude": false, "my-tool": false} {
		if declarative.IsPath(agent) != want {
			t.Errorf("IsPath(%q) != %v", agent, want)
		}
	}
}
