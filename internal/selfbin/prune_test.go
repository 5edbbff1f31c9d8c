package selfbin

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPruneKeepsOtherProcessesBuilds: a build for another executable that
// was used lately stays (another process mounts it into its containers);
// one unused for a day goes, as do the old static CLI builds.
func TestPruneKeepsOtherProcessesBuilds(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	mk := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		when := now.Add(-age)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keep := mk("outpost-sandbox-amd64-mine", 48*time.Hour)
	fresh := mk("outpost-sandbox-amd64-other", time.Minute)
	building := mk("outpost-sandbox-amd64-other.building-12", time.Minute)
	other := mk("outpost-sandbox-arm64-old", 48*time.Hour)
	stale := mk("outpost-sandbox-amd64-stale", 25*time.Hour)
	abandoned := mk("outpost-sandbox-amd64-x.building-9", 25*time.Hour)
	static := mk("outpost-static-amd64-old", 25*time.Hour)

	prune(dir, "amd64", keep, now)
	for _, p := range []string{keep, fresh, building, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(p), err)
		}
	}
	for _, p := range []string{stale, abandoned, static} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s stayed", filepath.Base(p))
		}
	}
}

// TestTouchMarksUse: reusing a build renews its time, so a build in use is
// never a day old.
func TestTouchMarksUse(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b")
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	os.Chtimes(p, old, old)
	touch(p, now)
	if fi, _ := os.Stat(p); now.Sub(fi.ModTime()) > time.Minute {
		t.Errorf("touch left the time at %v", fi.ModTime())
	}
}
