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

// TestDocVersions: a module the docs name with its version ("**module**
// (v1.2.3" or "`module` v1.2.3") is at that version in go.mod, so that an
// upgrade does not leave the docs naming the old one. Modules the docs
// name as tried and kept out are not in go.mod and are not checked.
func TestDocVersions(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	required := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-z0-9.-]+\.[a-z]+/\S+) (v\S+)`).FindAllStringSubmatch(string(mod), -1) {
		required[m[1]] = m[2]
	}
	named := regexp.MustCompile("(?:\\*\\*|`)([a-z0-9.-]+\\.[a-z]+/[^*` ]+)(?:\\*\\*|`),? \\(?(v[0-9]+\\.[0-9]+\\.[0-9][^ ,;)]*)")
	checked := 0
	filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			if have, ok := required[m[1]]; ok {
				checked++
				if have != m[2] {
					t.Errorf("%s names %s %s; go.mod requires %s", p, m[1], m[2], have)
				}
			}
		}
		return nil
	})
	if checked == 0 {
		t.Error("no module of go.mod named with its version in docs/: the pattern no longer matches how the docs write them")
	}
}
