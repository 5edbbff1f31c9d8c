// Package testenv finds the real dependencies tests need — the pinned
// agent CLIs installed by scripts/install-clis.sh, a Docker Engine — and
// decides what happens when one is missing: under CI (CI=true) the test
// fails, elsewhere it is skipped loudly, naming the command that installs
// it.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// cliPin is an npm CLI as scripts/install-clis.sh installs it.
type cliPin struct{ pkg, version, program string }

var (
	pinsOnce sync.Once
	pinsMap  map[string]cliPin
	pinsErr  error
)

// pins are the npm pins of bootstrap/pins.json, the CLIs that
// scripts/install-clis.sh installs (it reads them from `outpost bootstrap
// --list --json`): nothing here repeats a version. The file is read from
// the source tree rather than through package bootstrap, so that test
// helpers of providers (which must not depend on bootstrap) can use this
// package.
func pins() (map[string]cliPin, error) {
	pinsOnce.Do(func() {
		file, err := pinFile()
		if err != nil {
			pinsErr = err
			return
		}
		data, err := os.ReadFile(file)
		if err != nil {
			pinsErr = err
			return
		}
		var f struct {
			Agents map[string]struct {
				Kind, Version, Program, Package string
			} `json:"agents"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			pinsErr = fmt.Errorf("%s: %w", file, err)
			return
		}
		pinsMap = map[string]cliPin{}
		for name, p := range f.Agents {
			if p.Kind == "npm" {
				pinsMap[name] = cliPin{p.Package, p.Version, p.Program}
			}
		}
	})
	return pinsMap, pinsErr
}

// pinFile is bootstrap/pins.json of the module (moduleRoot): beside this
// source file, else above the working directory.
func pinFile() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("testenv: bootstrap/pins.json: %w", err)
	}
	return filepath.Join(root, "bootstrap", "pins.json"), nil
}

// pin returns a CLI's pin; the zero value when it has none.
func pin(name string) cliPin {
	p, _ := pins()
	return p[name]
}

// CLIs lists the npm CLIs scripts/install-clis.sh installs, sorted.
func CLIs() []string {
	p, _ := pins()
	return slices.Sorted(maps.Keys(p))
}

// CLIPackage returns the npm package of a pinned CLI.
func CLIPackage(name string) string { return pin(name).pkg }

// CLIProgram returns the executable of a pinned CLI, in CLIDir's
// node_modules/.bin.
func CLIProgram(name string) string { return pin(name).program }

// CI reports whether the tests run under CI, where a missing dependency is
// a failure, not a skip.
func CI() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// Missing fails the test under CI and skips it loudly otherwise.
func Missing(t testing.TB, what, fix string) {
	t.Helper()
	msg := fmt.Sprintf("MISSING DEPENDENCY: %s — install it with: %s", what, fix)
	if CI() {
		t.Fatal(msg)
	}
	fmt.Fprintf(os.Stderr, "\n*** %s: SKIPPED: %s ***\n\n", t.Name(), msg)
	t.Skip(msg)
}

// Cache is the install cache of scripts/install-clis.sh and
// scripts/build-images.sh.
func Cache() string {
	if c := os.Getenv("OUTPOST_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "outpost")
}

// CLIDir returns the npm prefix of a pinned CLI ("claude", "codex",
// "copilot"), whether or not it is installed.
func CLIDir(name string) string {
	p := pin(name)
	return filepath.Join(Cache(), "npm", strings.ReplaceAll(p.pkg, "/", "+")+"@"+p.version)
}

// CLIVersion returns the pinned version of a CLI.
func CLIVersion(name string) string { return pin(name).version }

// RequireCLI returns the path of the pinned CLI's executable, or fails /
// skips the test when it is not installed.
func RequireCLI(t testing.TB, name string) string {
	t.Helper()
	all, err := pins()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p, ok := all[name]
	if !ok {
		t.Fatalf("testenv: no npm pin for %q", name)
	}
	dir := CLIDir(name)
	bin := filepath.Join(dir, "node_modules", ".bin", p.program)
	if _, err := os.Stat(filepath.Join(dir, ".installed")); err != nil {
		Missing(t, fmt.Sprintf("%s %s (%s)", p.pkg, p.version, dir), "scripts/install-clis.sh "+name)
	}
	if _, err := os.Stat(bin); err != nil {
		Missing(t, bin, "scripts/install-clis.sh "+name)
	}
	return bin
}

// RequireDocker fails or skips the test when no Docker Engine answers.
func RequireDocker(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.APIVersion}}").Run(); err != nil {
		Missing(t, "a running Docker Engine ("+err.Error()+")", "scripts/docker-up.sh (as root)")
	}
}

// RequireImage fails or skips the test when a test image is missing.
func RequireImage(t testing.TB, image string) {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "image", "inspect", image).Run(); err != nil {
		Missing(t, "the image "+image, "scripts/build-images.sh")
	}
}
