package selfbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestIdentity: a Go executable is named by the build ID the toolchain
// wrote into it (what `go tool buildid` prints), not by hashing the whole
// file; a file without one falls back to its digest; two different
// executables get two names.
func TestIdentity(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ELF executables")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "buildid", self).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	id, ok := goBuildID(self)
	if !ok || id != strings.TrimSpace(string(out)) {
		t.Fatalf("goBuildID(test binary) = %q, %v; go tool buildid says %q", id, ok, strings.TrimSpace(string(out)))
	}
	name, err := identity(self)
	if err != nil || len(name) != 16 {
		t.Fatalf("identity(test binary) = %q, %v", name, err)
	}

	// Not an ELF file, and an ELF file whose note is not Go's: the digest.
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := goBuildID(plain); ok {
		t.Error("goBuildID of a shell script: ok")
	}
	got, err := identity(plain)
	want, derr := digest(plain)
	if err != nil || derr != nil || got != want {
		t.Errorf("identity(script) = %q, %v; want its digest %q (%v)", got, err, want, derr)
	}
	if got == name {
		t.Error("two different files got the same identity")
	}
	if _, ok := goBuildID("/bin/sh"); ok {
		t.Error("goBuildID(/bin/sh): ok, want no Go build ID")
	}
	if _, err := identity(filepath.Join(dir, "missing")); err == nil {
		t.Error("identity of a missing file: no error")
	}
}
