package selfbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestLocateOrder: the in-sandbox binary beside outpost comes first, then
// outpost itself when static, then a static build of the CLI beside it.
func TestLocateOrder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux binaries")
	}
	t.Setenv(EnvVar, "") // an explicit binary would come first
	static := staticProgram(t)
	arch := runtime.GOARCH
	put := func(dir, name, from string) string {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	for _, tc := range []struct {
		name   string
		self   string   // what the running executable is
		beside []string // static binaries beside it
		want   string   // the name found; "" for ErrNotFound
	}{
		{"sandbox binary first", static, []string{"outpost-sandbox", "outpost-static"}, "outpost-sandbox"},
		{"sandbox binary by arch", script, []string{"outpost-sandbox-linux-" + arch}, "outpost-sandbox-linux-" + arch},
		{"static self", static, nil, "outpost"},
		{"static CLI beside", script, []string{"outpost-static"}, "outpost-static"},
		{"nothing", script, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			self := put(dir, "outpost", tc.self)
			for _, n := range tc.beside {
				put(dir, n, static)
			}
			got, err := locate(self, arch)
			if tc.want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("locate = %q, %v; want ErrNotFound", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(dir, tc.want) {
				t.Errorf("locate = %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// staticProgram builds a tiny static Linux program.
func staticProgram(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", "tiny", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return filepath.Join(dir, "tiny")
}

// TestHostAgent: outpost-sandbox beside outpost is the host's echo agent
// when it is executable, whatever its linkage.
func TestHostAgent(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "outpost")
	if _, ok := hostAgent(self); ok {
		t.Error("hostAgent found one in an empty directory")
	}
	p := filepath.Join(dir, "outpost-sandbox")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644)
	if _, ok := hostAgent(self); ok {
		t.Error("hostAgent took a file that is not executable")
	}
	os.Chmod(p, 0o755)
	if got, ok := hostAgent(self); !ok || got != p {
		t.Errorf("hostAgent = %q, %v; want %s", got, ok, p)
	}
	if _, ok := hostAgent(""); ok {
		t.Error("hostAgent without an executable found one")
	}
}
