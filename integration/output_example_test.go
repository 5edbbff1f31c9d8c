package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/testenv"
)

// TestOutputWorkedExample runs the JavaScript orchestrator of
// docs/output.md with Node.js (which the pinned CLIs need anyway) against
// the built outpost binary and the echo agent.
func TestOutputWorkedExample(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "scripts/install-clis.sh needs it too")
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "output.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Worked example.*?```js\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/output.md has no worked example")
	}
	program := string(m[1])
	// The echo agent's directives stand in for a model.
	for from, to := range map[string]string{
		`"Review the change in this directory."`: `'#json={"verdict": "pass"}'`,
		`"Fix what the review found."`:           `'#write=fixed.txt #json={"result": {"summary": "fixed it"}}'`,
	} {
		if !strings.Contains(program, from) {
			t.Fatalf("the example no longer says %s", from)
		}
		program = strings.Replace(program, from, to, 1)
	}
	dir := t.TempDir()
	bin := t.TempDir()
	if err := os.Symlink(outpostBinary(t), filepath.Join(bin, "outpost")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "example.js"), []byte(program), 0o644)
	cmd := exec.Command(node, "example.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+t.TempDir(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node example.js: %v\n%s", err, out)
	}
	want := "verdict: pass\ndone: fixed it | created fixed.txt\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
}
