package testenv

import (
	"os"
	"testing"
)

// TestSharedBuild: the second process to need a package takes the first
// one's build from the shared directory instead of linking its own.
func TestSharedBuild(t *testing.T) {
	dir := t.TempDir()
	const pkg = "github.com/outposthq/outpost/cmd/outpost-hello"
	first, err := sharedBuild(dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	// Another process's build: the same path, not linked again.
	second, err := sharedBuild(dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := os.Stat(second)
	if err != nil {
		t.Fatal(err)
	}
	if second != first || !os.SameFile(fi, again) || !again.ModTime().Equal(fi.ModTime()) {
		t.Errorf("the second build %s (%v) is not the first %s (%v)", second, again.ModTime(), first, fi.ModTime())
	}
}
