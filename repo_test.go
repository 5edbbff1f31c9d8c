package outpost_test

import (
	"go/build"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/outposthq/outpost"

type pkg struct {
	path    string // import path
	imports []string
	doc     bool
	name    string
}

// packages lists the module's packages with their non-test imports.
func packages(t *testing.T) []pkg {
	t.Helper()
	var out []pkg
	filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(p, build.ImportComment)
		if err != nil {
			return nil // no Go files
		}
		ip := module
		if p != "." {
			ip += "/" + filepath.ToSlash(p)
		}
		out = append(out, pkg{path: ip, imports: bp.Imports, doc: bp.Doc != "", name: bp.Name})
		return nil
	})
	if len(out) < 10 {
		t.Fatalf("found only %d packages", len(out))
	}
	return out
}

// TestPackageDocs: every package says what it is for.
func TestPackageDocs(t *testing.T) {
	for _, p := range packages(t) {
		if !p.doc {
			t.Errorf("%s has no package doc comment", p.path)
		}
	}
}

// TestLayering polices the dependency rules of docs/ARCHITECTURE.md.
func TestLayering(t *testing.T) {
	internal := func(s string) bool { return s == module || strings.HasPrefix(s, module+"/") }
	rules := []struct {
		pkgPrefix string
		allowed   func(imp string) bool
		why       string
	}{
		{module, func(string) bool { return false }, "the root error package is a leaf"},
		{module + "/harness", func(imp string) bool {
			return imp == module || strings.HasPrefix(imp, module+"/harness")
		}, "harness and the presets import nothing of outpost but the root and harness/... (the kit): a preset outside the module has all a built-in one has"},
		{module + "/conversation", func(imp string) bool {
			return !strings.HasPrefix(imp, module+"/sandbox") && !strings.HasPrefix(imp, module+"/providers")
		}, "conversation never imports sandbox"},
		{module + "/conversation/postgres", func(imp string) bool {
			return imp == module || imp == module+"/conversation" || imp == module+"/checkpoint" || imp == module+"/turnstore" || (strings.HasPrefix(imp, module+"/internal/") && !strings.HasPrefix(imp, module+"/internal/testenv"))
		}, "the postgres store imports only conversation, checkpoint (the objects' interface), the turn store contract, the root and leaf utilities (never sandbox)"},
		{module + "/turnstore", func(string) bool { return false }, "the turn store contract is a leaf: the postgres store implements it without the server"},
		{module + "/checkpoint", func(string) bool { return false }, "checkpoint is a leaf (go-git only): stores, the engine and the CLI build on it"},
		{module + "/bootstrap", func(imp string) bool {
			return !strings.HasPrefix(imp, module+"/sandbox") && !strings.HasPrefix(imp, module+"/providers")
		}, "bootstrap never imports sandbox"},
		{module + "/credentials", func(imp string) bool {
			return !strings.HasPrefix(imp, module+"/sandbox") && !strings.HasPrefix(imp, module+"/providers")
		}, "credentials never imports sandbox"},
		{module + "/sandbox/driver", func(imp string) bool {
			return imp == module || imp == module+"/harness" || imp == module+"/snapshot"
		}, "the driver contract imports only harness, the snapshot leaf and the root"},
		{module + "/snapshot", func(string) bool { return false }, "the workspace snapshot is a leaf: the driver contract, the shim and output share it"},
		{module + "/output", notDriver, "output never imports the driver contract: the snapshot type is in snapshot"},
		{module + "/internal/shim", notDriver, "the shim never imports the driver contract: the snapshot walker is in snapshot"},
		{module + "/sandbox", func(imp string) bool {
			return imp == module || strings.HasPrefix(imp, module+"/sandbox") || imp == module+"/harness" || imp == module+"/snapshot" || imp == module+"/bootstrap" || strings.HasPrefix(imp, module+"/internal/")
		}, "the portable layer imports only the driver contract, harness, bootstrap, the snapshot leaf, the root and leaf utilities: never the engine or what only the engine needs (conversation, credentials, checkpoint, output, gateway)"},
		{module + "/providers/tunnel", driverOnly, "the tunnel opener the providers share imports only what a provider may"},
		{module + "/providers", driverOnly, "providers import only sandbox/driver, harness, the root and leaf utilities"},
		{module + "/server", func(imp string) bool {
			return !strings.HasPrefix(imp, module+"/providers") && !strings.HasPrefix(imp, module+"/cmd")
		}, "the server takes providers from the registry: it never imports them"},
		{module + "/sandbox/memsandbox", driverOnly, "memsandbox is a provider: it imports only sandbox/driver, harness, the root and leaf utilities"},
	}
	for _, p := range packages(t) {
		for _, imp := range p.imports {
			if !internal(imp) {
				if first, _, _ := strings.Cut(imp, "/"); p.path == module+"/snapshot" && strings.Contains(first, ".") {
					t.Errorf("%s imports %s: the snapshot leaf imports only the standard library", p.path, imp)
				}
				continue
			}
			if strings.HasPrefix(imp, module+"/cmd") && !strings.HasPrefix(p.path, module+"/cmd/") {
				t.Errorf("%s imports %s: nobody imports the command", p.path, imp)
			}
			if strings.HasPrefix(p.path, module+"/providers/") && strings.HasPrefix(imp, module+"/providers/") && imp != module+"/providers/tunnel" {
				if provider(p.path) != provider(imp) {
					t.Errorf("%s imports %s: providers never import each other", p.path, imp)
				}
			}
			for _, r := range rules {
				inScope := p.path == r.pkgPrefix || (r.pkgPrefix != module && strings.HasPrefix(p.path, r.pkgPrefix+"/"))
				if inScope && !strings.HasSuffix(p.path, "test") && !r.allowed(imp) {
					t.Errorf("%s imports %s: %s", p.path, imp, r.why)
				}
			}
		}
	}
}

// notDriver refuses the driver contract and what imports it.
func notDriver(imp string) bool {
	return imp != module+"/sandbox/driver" && imp != module+"/sandbox" && !strings.HasPrefix(imp, module+"/providers")
}

// driverOnly is what a provider may import of outpost: the driver
// contract, harness, the root, its own subpackages and internal leaf
// utilities.
func driverOnly(imp string) bool {
	switch {
	case imp == module, imp == module+"/harness", imp == module+"/sandbox/driver", imp == module+"/snapshot", imp == module+"/sandbox/driver/settings":
		return true
	case strings.HasPrefix(imp, module+"/internal/"):
		return !strings.HasPrefix(imp, module+"/internal/testenv")
	case strings.HasPrefix(imp, module+"/providers/"):
		return true // its own subpackages; importing another provider is refused above
	}
	return false
}

// TestProviderDeps: no provider pulls in bootstrap, credentials or
// conversation, even indirectly (go list -deps).
func TestProviderDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "./providers/...", "./sandbox/memsandbox", "./sandbox/driver").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Fields(string(out)) {
		for _, banned := range []string{"/bootstrap", "/credentials", "/conversation"} {
			if strings.HasPrefix(line, module+banned) {
				t.Errorf("a provider depends on %s", line)
			}
		}
	}
}

func provider(path string) string {
	rest := strings.TrimPrefix(path, module+"/providers/")
	name, _, _ := strings.Cut(rest, "/")
	return name
}
