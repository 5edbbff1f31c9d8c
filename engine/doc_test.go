package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package doc's map of the lifecycle names every file of the engine,
// and no file that is gone.
func TestDocNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.go")
	have := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		have[f] = true
		if !strings.Contains(string(doc), f) {
			t.Errorf("doc.go does not name %s", f)
		}
	}
	for _, w := range strings.FieldsFunc(string(doc), func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == ',' || r == ';' || r == '(' || r == ')'
	}) {
		if strings.HasSuffix(w, ".go") && !have[w] {
			t.Errorf("doc.go names %s, which is not a file of the engine", w)
		}
	}
}
