package echo

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run runs the echo agent in dir with args and returns its final text.
func runAgent(t *testing.T, dir string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var final string
	for _, l := range strings.Split(out.String(), "\n") {
		var ln line
		if json.Unmarshal([]byte(l), &ln) == nil && ln.Type == "done" {
			final = ln.Text
		}
	}
	return final
}

func session(t *testing.T) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(os.Getenv("HOME"), ".echo", "sessions", "*.jsonl"))
	if len(m) != 1 {
		t.Fatalf("sessions %v", m)
	}
	return strings.TrimSuffix(filepath.Base(m[0]), ".jsonl")
}

func TestJSONDirectives(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	t.Chdir(dir)
	text := runAgent(t, dir, `give #json-after=1 #json={"name": "x"}`+"\nschema follows")
	if !strings.HasSuffix(text, "```json\n{\"broken\": \n```") {
		t.Errorf("first turn: %q", text)
	}
	text = runAgent(t, dir, "--resume", session(t), "repair please")
	if !strings.HasSuffix(text, "```json\n{\"name\": \"x\"}\n```") {
		t.Errorf("second turn: %q", text)
	}
	if text := runAgent(t, dir, "just #json=[1,2]"); !strings.HasSuffix(text, "```json\n[1,2]\n```") {
		t.Errorf("#json: %q", text)
	}
	if text := runAgent(t, dir, "no directive"); strings.Contains(text, "```") {
		t.Errorf("plain: %q", text)
	}
}

func TestFileDirectives(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile("old.txt", []byte("x"), 0o644)
	os.WriteFile("edit.txt", []byte("x"), 0o644)
	runAgent(t, dir, "#write=sub/new.txt #append=edit.txt #rm=old.txt")
	if b, err := os.ReadFile("sub/new.txt"); err != nil || string(b) != "written by echo\n" {
		t.Errorf("new: %q %v", b, err)
	}
	if b, _ := os.ReadFile("edit.txt"); string(b) != "xappended by echo\n" {
		t.Errorf("edit: %q", b)
	}
	if _, err := os.Stat("old.txt"); !os.IsNotExist(err) {
		t.Errorf("old.txt: %v", err)
	}
}

// runLines runs the echo agent with args and returns its output lines.
func runLines(t *testing.T, args ...string) []line {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ln line
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, ln)
	}
	return lines
}

// TestFileDirectivesConfined: the file directives never reach outside the
// working directory, whether by an absolute path, "..", or a link; each
// refusal is an error tool result and a denied line, and the directives
// inside still run.
func TestFileDirectivesConfined(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	os.WriteFile(victim, []byte("keep"), 0o644)
	dir := filepath.Join(t.TempDir(), "work")
	os.MkdirAll(dir, 0o755)
	t.Chdir(dir)
	os.Symlink(outside, "abs-link")
	os.Symlink("..", "up-link")
	os.Symlink("inside.txt", "ok-link")
	os.Mkdir("sub", 0o755)
	refused := []string{
		"#write=" + filepath.Join(outside, "abs.txt"),
		"#write=../escaped.txt",
		"#write=sub/../../escaped2.txt",
		"#write=abs-link/through.txt",
		"#write=up-link/through2.txt",
		"#append=" + victim,
		"#append=abs-link/victim.txt",
		"#rm=" + victim,
		"#rm=../" + filepath.Base(outside) + "/victim.txt",
		"#rm=up-link/work/../../" + filepath.Base(outside) + "/victim.txt",
	}
	prompt := strings.Join(refused, " ") + " #write=inside.txt #append=ok-link #write=sub/../b.txt"
	lines := runLines(t, "--", prompt)

	var denied, errResults []string
	for _, l := range lines {
		switch {
		case l.Type == "denied":
			denied = append(denied, l.Text)
		case l.Type == "tool_result" && l.Error:
			errResults = append(errResults, l.Output)
		}
	}
	if len(denied) != len(refused) || len(errResults) != len(refused) {
		t.Errorf("%d denied lines and %d error results for %d refused directives:\n%s\n%s", len(denied), len(errResults), len(refused),
			strings.Join(denied, "\n"), strings.Join(errResults, "\n"))
	}
	for i, d := range denied {
		if i < len(refused) && !strings.Contains(d, refused[i]) || !strings.Contains(d, "outside the working directory") {
			t.Errorf("denied line %d: %q", i, d)
		}
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("outside the working directory: %v", entries)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim: %q", b)
	}
	for _, p := range []string{filepath.Join(dir, "..", "escaped.txt"), filepath.Join(dir, "..", "escaped2.txt"), filepath.Join(dir, "..", "through2.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if b, _ := os.ReadFile("inside.txt"); string(b) != "written by echo\nappended by echo\n" {
		t.Errorf("inside.txt: %q", b)
	}
	if _, err := os.Stat("b.txt"); err != nil {
		t.Errorf("sub/../b.txt stays inside and is written: %v", err)
	}
}
