package outpost_test

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
)

// TestArchitectureDeps holds docs/ARCHITECTURE.md's package table against
// the real imports: every package of the module belongs to a row (the
// longest path of the row's first column that is it or holds it), and a
// row's "depends on" column names exactly the rows its packages import
// (non-test files, go/build's view of the imports; test helpers of a row
// count as the row).
func TestArchitectureDeps(t *testing.T) {
	rows := architectureRows(t)
	pkgs := packages(t)
	rowOf := func(path string) (int, bool) {
		best, bestLen := -1, -1
		for i, r := range rows {
			for _, p := range r.packages {
				full := modulePath(p)
				under := full != module && strings.HasPrefix(path, full+"/") // the root holds only itself
				if (path == full || under) && len(full) > bestLen {
					best, bestLen = i, len(full)
				}
			}
		}
		return best, best >= 0
	}
	actual := make([]map[int]bool, len(rows))
	for i := range actual {
		actual[i] = map[int]bool{}
	}
	for _, p := range pkgs {
		if strings.Contains(p.path, "/testdata/") {
			continue
		}
		i, ok := rowOf(p.path)
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md: package %s belongs to no row of the package table", p.path)
			continue
		}
		for _, imp := range p.imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			j, ok := rowOf(imp)
			if ok && j != i {
				actual[i][j] = true
			}
		}
	}
	for i, r := range rows {
		declared := map[int]bool{}
		for _, d := range r.deps {
			j, ok := rowOf(modulePath(d))
			if !ok {
				t.Errorf("docs/ARCHITECTURE.md: row %s depends on %s, which is no package", r.name(), d)
				continue
			}
			declared[j] = true
		}
		var missing, extra []string
		for j := range actual[i] {
			if !declared[j] {
				missing = append(missing, rows[j].name())
			}
		}
		for j := range declared {
			if !actual[i][j] {
				extra = append(extra, rows[j].name())
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		if len(missing) > 0 {
			t.Errorf("docs/ARCHITECTURE.md: row %s imports %s but does not say so", r.name(), strings.Join(missing, ", "))
		}
		if len(extra) > 0 {
			t.Errorf("docs/ARCHITECTURE.md: row %s says it depends on %s, but imports none of it", r.name(), strings.Join(extra, ", "))
		}
	}
}

type archRow struct {
	packages []string // module-relative paths; "outpost" is the module root
	deps     []string
}

func (r archRow) name() string { return "`" + r.packages[0] + "`" }

var backticked = regexp.MustCompile("`([a-z0-9/._-]+)`")

// architectureRows reads the package table of docs/ARCHITECTURE.md: the
// packages of a row are the backticked paths of its first column, its
// dependencies those of its last.
func architectureRows(t *testing.T) []archRow {
	t.Helper()
	b, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Packages")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no ## Packages section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var rows []archRow
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cols) < 3 {
			t.Fatalf("docs/ARCHITECTURE.md: a package row without three columns: %s", line)
		}
		r := archRow{packages: ticks(cols[0]), deps: ticks(cols[len(cols)-1])}
		if len(r.packages) == 0 {
			continue
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("docs/ARCHITECTURE.md: only %d package rows", len(rows))
	}
	return rows
}

func ticks(s string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

func modulePath(p string) string {
	if p == "outpost" {
		return module
	}
	return module + "/" + p
}

// TestErrorCodeList holds the error-code list of docs/ARCHITECTURE.md and
// the code table of docs/errors.md to outpost.Codes.
func TestErrorCodeList(t *testing.T) {
	arch, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(arch), "## Error codes")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no section ## Error codes")
	}
	section, _, _ = strings.Cut(section, "(`outpost.Codes`")
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for _, c := range outpost.Codes {
		want = append(want, string(c))
	}
	if strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("docs/ARCHITECTURE.md lists the codes %v; outpost.Codes is %v", listed, want)
	}
	errs, err := os.ReadFile("docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range want {
		if !regexp.MustCompile("(?m)^\\| `" + c + "` \\|").Match(errs) {
			t.Errorf("docs/errors.md has no table row for the code %s", c)
		}
	}
}
