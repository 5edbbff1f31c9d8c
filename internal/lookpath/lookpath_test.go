package lookpath

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if got, err := Find("tool", "/nonexistent:"+dir); err != nil || got != exe {
		t.Errorf("Find(tool) = %q, %v", got, err)
	}
	for _, name := range []string{"data", "sub", "missing", ""} {
		if _, err := Find(name, dir); err == nil {
			t.Errorf("Find(%q) succeeded", name)
		}
	}
	if _, err := Find("missing", dir); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Find(missing) = %v, want exec.ErrNotFound", err)
	}
	if got, err := Find(exe, ""); err != nil || got != exe {
		t.Errorf("Find(absolute) = %q, %v", got, err)
	}
	if _, err := Find(filepath.Join(dir, "data"), ""); err == nil {
		t.Error("Find(absolute non-executable) succeeded")
	}
	// An empty PATH entry is the working directory, made absolute.
	t.Chdir(dir)
	if got, err := Find("tool", "/nonexistent::"); err != nil || got != exe {
		t.Errorf("Find(tool) through an empty entry = %q, %v", got, err)
	}
}
