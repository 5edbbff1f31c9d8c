package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/checkpoint"
)

// trees records a base and a turn's result: the turn edits the second
// line of a.txt, deletes gone.txt and adds new.txt.
func trees(t *testing.T, objs checkpoint.Objects) (base, theirs plumbing.Hash) {
	t.Helper()
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, map[string]string{"a.txt": "one\ntwo\nthree\nfour\n", "gone.txt": "bye\n", "keep.txt": "same\n"})
	b, err := checkpoint.Snapshot(ctx, objs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(ws, "gone.txt"))
	write(t, ws, map[string]string{"a.txt": "one\nTWO\nthree\nfour\n", "new.txt": "hello\n"})
	th, err := checkpoint.Snapshot(ctx, objs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b.Hash, th.Hash
}

func TestApply(t *testing.T) {
	objs := checkpoint.NewMemory()
	base, theirs := trees(t, objs)
	ctx := context.Background()

	t.Run("onto the base", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.txt": "one\ntwo\nthree\nfour\n", "gone.txt": "bye\n", "keep.txt": "same\n"})
		done, err := checkpoint.Apply(ctx, objs, base, theirs, dir)
		if err != nil {
			t.Fatal(err)
		}
		want := &checkpoint.Applied{Written: []string{"a.txt", "new.txt"}, Deleted: []string{"gone.txt"}}
		if d := cmp.Diff(want, done); d != "" {
			t.Fatalf("(-want +got)\n%s", d)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != "one\nTWO\nthree\nfour\n" {
			t.Fatalf("a.txt %q", got)
		}
	})
	t.Run("onto a tree that changed elsewhere: merged", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.txt": "one\ntwo\nthree\nFOUR\n", "gone.txt": "bye\n"})
		done, err := checkpoint.Apply(ctx, objs, base, theirs, dir)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != "one\nTWO\nthree\nFOUR\n" || len(done.Merged) != 1 {
			t.Fatalf("a.txt %q %+v", got, done)
		}
	})
	t.Run("a conflict writes nothing", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.txt": "one\nzwei\nthree\nfour\n", "gone.txt": "bye\n"})
		_, err := checkpoint.Apply(ctx, objs, base, theirs, dir)
		var ce *checkpoint.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, checkpoint.ErrConflict) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "a.txt" {
			t.Fatalf("%v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
			t.Fatal("a conflict wrote new.txt")
		}
		if _, err := os.Stat(filepath.Join(dir, "gone.txt")); err != nil {
			t.Fatal("a conflict deleted gone.txt")
		}
	})
	t.Run("already applied", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.txt": "one\nTWO\nthree\nfour\n", "new.txt": "hello\n"})
		done, err := checkpoint.Apply(ctx, objs, base, theirs, dir)
		if err != nil || len(done.Unchanged) != 3 || len(done.Written) != 0 {
			t.Fatalf("%+v %v", done, err)
		}
	})
}

// TestApplyNeverLeavesTheTree: a working tree whose directory is a link
// out of it gets nothing written through the link, and nothing at all.
func TestApplyNeverLeavesTheTree(t *testing.T) {
	objs := checkpoint.NewMemory()
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, map[string]string{"top.txt": "x\n"})
	base, _ := checkpoint.Snapshot(ctx, objs, ws, nil)
	write(t, ws, map[string]string{"sub/evil.txt": "written\n", "top2.txt": "y\n"})
	theirs, _ := checkpoint.Snapshot(ctx, objs, ws, nil)

	outside := t.TempDir()
	dir := t.TempDir()
	write(t, dir, map[string]string{"top.txt": "x\n", "sub": "->" + outside})
	_, err := checkpoint.Apply(ctx, objs, base.Hash, theirs.Hash, dir)
	if err == nil {
		t.Fatal("applied through a link out of the tree")
	}
	if _, err := os.Stat(filepath.Join(outside, "evil.txt")); !os.IsNotExist(err) {
		t.Fatal("a file was written outside the tree")
	}
	if _, err := os.Stat(filepath.Join(dir, "top2.txt")); !os.IsNotExist(err) {
		t.Fatal("part of the change was applied")
	}
}
