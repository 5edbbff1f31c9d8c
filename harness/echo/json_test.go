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
