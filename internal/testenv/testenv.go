// Package testenv finds the real dependencies tests need — the pinned
// agent CLIs installed by scripts/install-clis.sh, a Docker Engine — and
// decides what happens when one is missing: under CI (CI=true) the test
// fails, elsewhere it is skipped loudly, naming the command that installs
// it.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CLI pins, as installed by scripts/install-clis.sh.
var pins = map[string]struct{ pkg, version string }{
	"claude":  {"@anthropic-ai/claude-code", "2.1.332"},
	"codex":   {"@openai/codex", "0.171.0"},
	"copilot": {"@github/copilot", "1.0.102"},
}

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
	p := pins[name]
	return filepath.Join(Cache(), "npm", strings.ReplaceAll(p.pkg, "/", "+")+"@"+p.version)
}

// CLIVersion returns the pinned version of a CLI.
func CLIVersion(name string) string { return pins[name].version }

// RequireCLI returns the path of the pinned CLI's executable, or fails /
// skips the test when it is not installed.
func RequireCLI(t testing.TB, name string) string {
	t.Helper()
	if _, ok := pins[name]; !ok {
		t.Fatalf("testenv: no pin for %q", name)
	}
	dir := CLIDir(name)
	bin := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(filepath.Join(dir, ".installed")); err != nil {
		Missing(t, fmt.Sprintf("%s %s (%s)", pins[name].pkg, pins[name].version, dir), "scripts/install-clis.sh "+name)
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
