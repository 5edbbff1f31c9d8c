package output

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/snapshot"
)

func TestDiffLocalWorkspace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("keep.txt", "same")
	write("edit.txt", "old")
	write("gone.txt", "bye")
	write("chmod.sh", "#!/bin/sh")
	write("sub/deep.txt", "x")
	write(".git/HEAD", "ref")
	write(".outpost/.env", "SECRET=1")
	before, err := snapshot.Walk(ctx, dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !before.Complete || len(before.Files) != 5 {
		t.Fatalf("before = %+v", before)
	}
	write("new/file.txt", "hi")
	write("edit.txt", "new content")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "edit.txt"), old, old) // an edit that keeps... a different size
	os.Remove(filepath.Join(dir, "gone.txt"))
	os.Chmod(filepath.Join(dir, "chmod.sh"), 0o755)
	write(".git/index", "ignored")
	write(".outpost/x", "ignored")
	os.Symlink("keep.txt", filepath.Join(dir, "link"))
	after, err := snapshot.Walk(ctx, dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := Diff(before, after)
	want := &Changes{Complete: true, Files: []ChangedFile{
		{"chmod.sh", Modified}, {"edit.txt", Modified}, {"gone.txt", Deleted}, {"link", Created}, {"new/file.txt", Created},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Diff (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"chmod.sh", "edit.txt", "gone.txt", "link", "new/file.txt"}, got.Paths()); d != "" {
		t.Error(d)
	}
}

func TestDiffBounded(t *testing.T) {
	st := func(n int64) snapshot.FileStat { return snapshot.FileStat{Size: n} }
	before := snapshot.Snapshot{Files: map[string]snapshot.FileStat{"a": st(1), "b/x": st(1), "c": st(1)}, Last: "c"}
	after := snapshot.Snapshot{Files: map[string]snapshot.FileStat{"a": st(2), "b.txt": st(1)}, Last: "b.txt"}
	got := Diff(before, after)
	// Walk order: a, b/x, b.txt, c: only paths up to b.txt were seen by
	// both walks; c is not reported.
	want := &Changes{Complete: false, Files: []ChangedFile{{"a", Modified}, {"b/x", Deleted}, {"b.txt", Created}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Diff (-want +got):\n%s", d)
	}
	dir := t.TempDir()
	for _, n := range []string{"1", "2", "3"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	s, err := snapshot.Walk(context.Background(), dir, 2)
	if err != nil || s.Complete || len(s.Files) != 2 || s.Last != "2" {
		t.Fatalf("bounded walk = %+v, %v", s, err)
	}
}

func TestWalkLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"a/b", "a.txt", true}, {"a", "a/b", true}, {"a/b", "a", false}, {"b", "a/z", false}, {"x", "x", false}} {
		if got := walkLess(c.a, c.b); got != c.want {
			t.Errorf("walkLess(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
