package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// repoRoot is the module root, three levels above this package.
const repoRoot = "../../.."

// markdownFiles are the project's documents: README.md and every
// Markdown file under docs/, scripts/ and clients/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(repoRoot, "README.md")}
	for _, dir := range []string{"docs", "scripts", "clients"} {
		filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return nil
		})
	}
	return files
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	fence      = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	// A command line names a verb: "outpost run", "go run ./cmd/outpost conversations ls".
	// The program stands first in the span or line (after a prompt or a
	// shell separator), or after `go run ./cmd/`.
	verbUse = regexp.MustCompile(`(?:^\s*|\$\s+|[;&|]\s*|go run \./cmd/)outpost((?:\s+[a-z][a-z-]*)+)`)
	// A package path the architecture page names.
	pkgPath = regexp.MustCompile(`^(?:cmd|internal|sandbox|providers|harness|conversation|credentials|bootstrap|integration|clients|server|output)(?:/[a-z0-9_.-]+)*/?$`)
)

// TestDocLinks: every relative link in the documents points at a file or
// directory that exists.
func TestDocLinks(t *testing.T) {
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel(f), m[1])
			}
		}
	}
}

// TestDocCommands: every `outpost VERB [SUB]` the documents show in code
// is a command the CLI has.
func TestDocCommands(t *testing.T) {
	root := (&app{}).root()
	root.InitDefaultCompletionCmd()
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var code []string
		text := string(b)
		for _, m := range fence.FindAllStringSubmatch(text, -1) {
			code = append(code, strings.Split(m[1], "\n")...)
		}
		text = fence.ReplaceAllString(text, "")
		for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
			code = append(code, m[1])
		}
		for _, c := range code {
			c, _, _ = strings.Cut(c, " #") // a shell comment
			for _, m := range verbUse.FindAllStringSubmatch(c, -1) {
				if err := checkVerb(root, strings.Fields(m[1])); err != "" {
					t.Errorf("%s shows `outpost%s`: %s", rel(f), m[1], err)
				}
			}
		}
	}
}

// preCobra are the hidden subcommands main handles before the command
// tree sees the arguments (the sandbox process shim).
var preCobra = map[string]bool{"sandbox-shim": true}

// checkVerb follows words down the command tree: the first must be a
// command; later words are subcommands while they name one, and
// arguments after that.
func checkVerb(root *cobra.Command, words []string) string {
	if preCobra[words[0]] {
		return ""
	}
	cmd := root
	for i, w := range words {
		var next *cobra.Command
		for _, c := range cmd.Commands() {
			if c.Name() == w || c.HasAlias(w) {
				next = c
			}
		}
		if next == nil {
			if i == 0 {
				return "the CLI has no command " + w
			}
			if cmd.HasSubCommands() && !cmd.Runnable() {
				return "the command " + cmd.CommandPath() + " has no subcommand " + w
			}
			return ""
		}
		cmd = next
	}
	return ""
}

// TestArchitecturePackages: every package path docs/ARCHITECTURE.md
// names exists and holds Go code (or, for clients/, files).
func TestArchitecturePackages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range inlineCode.FindAllStringSubmatch(string(b), -1) {
		for _, p := range strings.Split(m[1], " + ") {
			p = strings.TrimSpace(p)
			if !pkgPath.MatchString(p) || strings.Contains(p, "*") {
				continue
			}
			seen++
			dir := filepath.Join(repoRoot, filepath.FromSlash(strings.TrimSuffix(p, "/")))
			fi, err := os.Stat(dir)
			if err != nil {
				t.Errorf("docs/ARCHITECTURE.md names %s, which does not exist", p)
				continue
			}
			if !fi.IsDir() || strings.HasPrefix(p, "clients") {
				continue
			}
			hasGo := false
			filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
				hasGo = hasGo || (d != nil && strings.HasSuffix(d.Name(), ".go"))
				return nil
			})
			if !hasGo {
				t.Errorf("docs/ARCHITECTURE.md names %s, which holds no Go package", p)
			}
		}
	}
	if seen < 10 {
		t.Errorf("docs/ARCHITECTURE.md names only %d package paths; is the pattern stale?", seen)
	}
}

func rel(p string) string {
	r, err := filepath.Rel(repoRoot, p)
	if err != nil {
		return p
	}
	return r
}
