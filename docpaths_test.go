package outpost_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPath matches a path of this repository named in code quotes in the
// docs: `internal/workspace`, `providers/docker/serve.go`,
// `scripts/test.sh`.
var repoPath = regexp.MustCompile("`((?:cmd|internal|providers|sandbox|harness|integration|scripts|conversation|output|server|clients)/[A-Za-z0-9_./-]*[A-Za-z0-9_])/?`")

// TestDocPaths: every repository path the README and docs/ name in code
// quotes exists, so that a renamed or removed package is not left named
// (kubernetes.md once sent readers to an internal/wsync that never was).
func TestDocPaths(t *testing.T) {
	files := []string{"README.md"}
	filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if len(files) < 5 {
		t.Fatalf("found only %d documents", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(b), -1) {
			p := m[1]
			if strings.ContainsAny(p, "*<>") {
				continue
			}
			// internal/owner.Owner, providers/docker.TestX: the package.
			if dir, name, ok := strings.Cut(p[strings.LastIndex(p, "/")+1:], "."); ok && name != "" && name[0] >= 'A' && name[0] <= 'Z' {
				p = p[:strings.LastIndex(p, "/")+1] + dir
			}
			if _, err := os.Stat(filepath.FromSlash(p)); err != nil {
				t.Errorf("%s names %s, which is not in the repository", f, p)
			}
		}
	}
}
