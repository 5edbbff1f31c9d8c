package selfbin_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/outposthq/outpost/internal/selfbin"
)

// build compiles a tiny program with cgo on or off.
func build(t *testing.T, cgo bool) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"os/user\"\n\nfunc main() { user.Current() }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, ".")
	cmd.Dir = dir
	c := "0"
	if cgo {
		c = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+c, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		if cgo {
			t.Skipf("no cgo build here: %v %s", err, b)
		}
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func TestCheckAndLocate(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux binaries")
	}
	static := build(t, false)
	if err := selfbin.Check(static, runtime.GOARCH); err != nil {
		t.Errorf("Check(static): %v", err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if err := selfbin.Check(static, other); !errors.Is(err, selfbin.ErrNotStatic) {
		t.Errorf("Check for %s: %v, want ErrNotStatic", other, err)
	}
	if err := selfbin.Check(filepath.Join(t.TempDir(), "missing"), runtime.GOARCH); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check(missing): %v", err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if err := selfbin.Check(notELF, runtime.GOARCH); !errors.Is(err, selfbin.ErrNotStatic) {
		t.Errorf("Check(script): %v", err)
	}

	t.Setenv(selfbin.EnvVar, static)
	if got, err := selfbin.Locate(""); err != nil || got != static {
		t.Errorf("Locate with %s: %q, %v", selfbin.EnvVar, got, err)
	}
	dynamic := build(t, true)
	if err := selfbin.Check(dynamic, runtime.GOARCH); !errors.Is(err, selfbin.ErrNotStatic) {
		t.Errorf("Check(dynamic): %v, want ErrNotStatic", err)
	}
	t.Setenv(selfbin.EnvVar, dynamic)
	if _, err := selfbin.Locate(""); !errors.Is(err, selfbin.ErrNotStatic) {
		t.Errorf("Locate with a dynamic %s: %v, want an error (an explicit choice is never ignored)", selfbin.EnvVar, err)
	}
}

func TestArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "s390x": "s390x"} {
		if got := selfbin.Arch(in); got != want {
			t.Errorf("Arch(%q) = %q, want %q", in, got, want)
		}
	}
}
