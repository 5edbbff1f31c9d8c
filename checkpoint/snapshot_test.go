package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/checkpoint"
)

// write lays out files (path → content; a content starting with "->" is
// a symbolic link to the rest) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(full)
		if target, ok := strings.CutPrefix(c, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func paths(t *testing.T, objs checkpoint.Objects, tree plumbing.Hash) []string {
	t.Helper()
	fs, err := checkpoint.List(context.Background(), objs, tree)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

func TestSnapshotLeavesOut(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"main.go":             "package main\n",
		".gitignore":          "build/\n*.log\n!keep.log\n",
		"build/out.bin":       "x",
		"a.log":               "log",
		"keep.log":            "kept",
		"sub/.gitignore":      "secret.txt\n",
		"sub/secret.txt":      "s",
		"sub/ok.txt":          "ok",
		".git/config":         "[core]",
		"sub/.git/HEAD":       "ref",
		".outpost/.env":       "KEY=v",
		"deep/.outpost/x":     "kept: only the top-level .outpost is private",
		"node_modules/m/i.js": "x",
		"link":                "->main.go",
		"out":                 "->/etc/passwd",
	})
	objs := checkpoint.NewMemory()
	tr, err := checkpoint.Snapshot(context.Background(), objs, dir, &checkpoint.Options{Include: []string{"build/out.bin"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".gitignore", "build/out.bin", "deep/.outpost/x", "keep.log", "link", "main.go", "node_modules/m/i.js", "out", "sub/.gitignore", "sub/ok.txt"}
	if d := cmp.Diff(want, paths(t, objs, tr.Hash)); d != "" {
		t.Fatalf("paths (-want +got):\n%s", d)
	}
	fs, _ := checkpoint.List(context.Background(), objs, tr.Hash)
	for _, f := range fs {
		if f.Path == "out" {
			data, _ := checkpoint.ReadBlob(context.Background(), objs, f.Hash)
			if string(data) != "/etc/passwd" || f.Mode.String() != "0120000" {
				t.Fatalf("a link out of the tree is stored as a link: %q %s", data, f.Mode)
			}
		}
	}
}

// TestSnapshotIncremental: a second snapshot after a change of one file
// writes one blob and the trees above it, and reads only that file.
func TestSnapshotIncremental(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 50 {
		files[filepath.ToSlash(filepath.Join("d", string(rune('a'+i%5)), "f"+string(rune('a'+i/5))))] = strings.Repeat("x", 1000+i)
	}
	write(t, dir, files)
	old := time.Now().Add(-time.Hour)
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, old, old) })
	objs := checkpoint.NewMemory()
	idx := filepath.Join(t.TempDir(), "idx")
	o := &checkpoint.Options{Index: idx}
	first, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Files != 50 || first.Written != 50+5+1+1 {
		t.Fatalf("first: %+v", first)
	}
	write(t, dir, map[string]string{"d/c/fb": "changed"})
	second, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	// One blob, and the trees d/c, d and the root.
	if second.Written != 4 || second.WrittenBytes > 2000 {
		t.Fatalf("second wrote %d objects, %d bytes: %+v", second.Written, second.WrittenBytes, second)
	}
	n, err := checkpoint.Changed(context.Background(), objs, first.Hash, second.Hash)
	if err != nil || n != 1 {
		t.Fatalf("changed %d %v", n, err)
	}
	// The same snapshot again is the same tree and writes nothing.
	third, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil || third.Hash != second.Hash || third.Written != 0 {
		t.Fatalf("third %+v %v", third, err)
	}
}

// TestSnapshotCacheNotFooled: a file rewritten with the same size within
// the racy window is read again, not taken from the cache.
func TestSnapshotCacheNotFooled(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"a": "one"})
	objs := checkpoint.NewMemory()
	o := &checkpoint.Options{Index: filepath.Join(t.TempDir(), "idx")}
	first, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "a"))
	write(t, dir, map[string]string{"a": "two"})
	os.Chtimes(filepath.Join(dir, "a"), fi.ModTime(), fi.ModTime())
	second, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Hash == second.Hash {
		t.Fatal("a rewritten file was taken from the cache")
	}
}

func TestSnapshotLimits(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"big": strings.Repeat("x", 2000), "small": "x"})
	objs := checkpoint.NewMemory()
	_, err := checkpoint.Snapshot(context.Background(), objs, dir, &checkpoint.Options{MaxFile: 1000})
	if !errors.Is(err, checkpoint.ErrTooLarge) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("per file: %v", err)
	}
	_, err = checkpoint.Snapshot(context.Background(), objs, dir, &checkpoint.Options{MaxBytes: 1500})
	if !errors.Is(err, checkpoint.ErrTooLarge) {
		t.Fatalf("per checkpoint: %v", err)
	}
	_, err = checkpoint.Snapshot(context.Background(), objs, dir, &checkpoint.Options{MaxFiles: 1})
	if !errors.Is(err, checkpoint.ErrTooLarge) {
		t.Fatalf("file count: %v", err)
	}
}

func TestSnapshotMasks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"config.txt": "token=sk-secret-value-123\n"})
	objs := checkpoint.NewMemory()
	mask := func(b []byte) []byte {
		return bytes.ReplaceAll(b, []byte("sk-secret-value-123"), []byte("*******************"))
	}
	tr, err := checkpoint.Snapshot(context.Background(), objs, dir, &checkpoint.Options{Mask: mask})
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := checkpoint.List(context.Background(), objs, tr.Hash)
	data, _ := checkpoint.ReadBlob(context.Background(), objs, fs[0].Hash)
	if strings.Contains(string(data), "sk-secret") {
		t.Fatalf("a secret was stored: %q", data)
	}
}

// TestGitReadsCheckpoints: git itself checks the store (fsck) and finds
// the workspace's files in the commit (diff against the files on disk
// is empty).
func TestGitReadsCheckpoints(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("SKIP: no git binary on PATH: git's own reading of checkpoints is not checked")
	}
	ws := t.TempDir()
	write(t, ws, map[string]string{"a.txt": "alpha\n", "dir/b.txt": "beta\n", "link": "->a.txt", "tool.sh": "#!/bin/sh\n"})
	os.Chmod(filepath.Join(ws, "tool.sh"), 0o755)
	store := filepath.Join(t.TempDir(), "store.git")
	objs := checkpoint.NewDir(store)
	ctx := context.Background()
	tr, err := checkpoint.Snapshot(ctx, objs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Commit(ctx, objs, checkpoint.CommitInfo{Tree: tr.Hash, Title: "turn 1", Body: "do it", When: time.Now(),
		Trailers: []checkpoint.Trailer{{Key: checkpoint.TrailerTurn, Value: "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := objs.Name(ctx, "refs/outpost/c1/1", c); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(t.TempDir(), "index")
	run := func(args ...string) string {
		cmd := exec.Command(git, append([]string{"--git-dir", store}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("fsck", "--strict", "--no-dangling")
	run("--work-tree", ws, "add", "-A")
	if out := run("--work-tree", ws, "diff", "--cached", "--stat", c.String()); out != "" {
		t.Fatalf("git sees differences between the checkpoint and the files:\n%s", out)
	}
	if out := run("log", "--format=%B", "refs/outpost/c1/1"); !strings.Contains(out, "Outpost-Turn: 1") {
		t.Fatalf("trailers: %s", out)
	}
	if out := run("ls-tree", "-r", c.String()); !strings.Contains(out, "100755 blob") || !strings.Contains(out, "120000 blob") {
		t.Fatalf("modes: %s", out)
	}
}

func TestMaterializeRoundTrip(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, map[string]string{"a.txt": "alpha\n", "dir/b.txt": "beta\n", "link": "->a.txt", "x/y/z": "deep"})
	os.Chmod(filepath.Join(ws, "a.txt"), 0o755)
	objs := checkpoint.NewMemory()
	ctx := context.Background()
	tr, err := checkpoint.Snapshot(ctx, objs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "fork")
	idx := filepath.Join(t.TempDir(), "idx")
	if _, err := checkpoint.Materialize(ctx, objs, tr.Hash, out, &checkpoint.MaterializeOptions{Index: idx, When: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	again, err := checkpoint.Snapshot(ctx, objs, out, &checkpoint.Options{Index: idx})
	if err != nil || again.Hash != tr.Hash || again.Written != 0 {
		t.Fatalf("materialised tree snapshots back as %+v %v, want %s", again, err, tr.Hash)
	}
	if target, _ := os.Readlink(filepath.Join(out, "link")); target != "a.txt" {
		t.Fatalf("link %q", target)
	}
	if fi, _ := os.Stat(filepath.Join(out, "a.txt")); fi.Mode()&0o100 == 0 {
		t.Fatal("exec bit lost")
	}
	if _, err := checkpoint.Materialize(ctx, objs, tr.Hash, out, nil); !errors.Is(err, checkpoint.ErrUnsafe) {
		t.Fatalf("into a non-empty directory: %v", err)
	}
}

// TestCorruptObject: a stored object whose content does not hash to its
// id is ErrCorrupt, in Materialize and Diff alike.
func TestCorruptObject(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, map[string]string{"a.txt": "alpha\n"})
	store := t.TempDir()
	objs := checkpoint.NewDir(store)
	ctx := context.Background()
	tr, err := checkpoint.Snapshot(ctx, objs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := checkpoint.List(ctx, objs, tr.Hash)
	h := fs[0].Hash.String()
	loose := filepath.Join(store, "objects", h[:2], h[2:])
	os.Chmod(loose, 0o644)
	if err := os.WriteFile(loose, []byte("not zlib at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := checkpoint.NewDir(store)
	_, err = checkpoint.Materialize(ctx, fresh, tr.Hash, t.TempDir(), nil)
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("materialize: %v", err)
	}
	_, _, err = checkpoint.Diff(ctx, fresh, plumbing.ZeroHash, tr.Hash)
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("diff: %v", err)
	}
}

// TestDamagedIndex: a stat cache that is not one (truncated, garbage,
// another directory's) is ignored: every file is read.
func TestDamagedIndex(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"a": "one", "b/c": "two"})
	objs := checkpoint.NewMemory()
	idx := filepath.Join(t.TempDir(), "idx")
	o := &checkpoint.Options{Index: idx}
	want, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(idx)
	for name, b := range map[string][]byte{"garbage": []byte("not an index"), "truncated": good[:len(good)-7], "empty": nil, "huge count": append(good[:len(good):len(good)], 0xff, 0xff)} {
		os.WriteFile(idx, b, 0o600)
		got, err := checkpoint.Snapshot(context.Background(), objs, dir, o)
		if err != nil || got.Hash != want.Hash {
			t.Fatalf("%s: %v %v", name, got, err)
		}
	}
}

// TestIndexOfAnotherStore: a stat cache made while snapshotting into one
// store is not trusted by another, which lacks its blobs.
func TestIndexOfAnotherStore(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"a": "one", "b/c": "two"})
	old := time.Now().Add(-time.Hour)
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, old, old) })
	o := &checkpoint.Options{Index: filepath.Join(t.TempDir(), "idx")}
	ctx := context.Background()
	if _, err := checkpoint.Snapshot(ctx, checkpoint.NewMemory(), dir, o); err != nil {
		t.Fatal(err)
	}
	other := checkpoint.NewMemory()
	tr, err := checkpoint.Snapshot(ctx, other, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.Materialize(ctx, other, tr.Hash, t.TempDir(), nil); err != nil {
		t.Fatalf("the second store lacks blobs the first store's cache named: %v", err)
	}
}
