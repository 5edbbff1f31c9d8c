package workspace_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/snapshot"
)

var errConflict = errors.New("conflict")

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

// TestRoundTrip copies a directory into a "sandbox" (a local directory
// named workspace), changes both sides, and syncs back: the sandbox's
// changes land, deletions apply where the host is unchanged, a conflict
// keeps the host's version with the sandbox's beside it, and .outpost is
// neither copied in nor written back.
func TestRoundTrip(t *testing.T) {
	ctx := t.Context()
	host := t.TempDir()
	write(t, host, "a.txt", "one\n")
	write(t, host, "both.txt", "base\n")
	write(t, host, "del.txt", "x\n")
	write(t, host, ".outpost/.env", "SECRET=s\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	m := workspace.NewManifest()
	if err := workspace.Write(ctx, tw, host, "", "", 0, 0, m); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	sb := filepath.Join(t.TempDir(), "workspace")
	os.Mkdir(sb, 0o755)
	if err := tarsafe.Extract(&buf, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sb, ".outpost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".outpost was copied in (%v)", err)
	}
	if m.Len() != 3 {
		t.Errorf("manifest has %d entries, want 3", m.Len())
	}
	write(t, sb, "a.txt", "two\n")
	write(t, sb, "both.txt", "sandbox\n")
	write(t, sb, "new/n.txt", "n\n")
	write(t, sb, ".outpost/.env", "SECRET=stolen\n")
	os.Remove(filepath.Join(sb, "del.txt"))
	write(t, host, "both.txt", "host\n")

	var back bytes.Buffer
	if err := tarsafe.WriteDir(ctx, &back, sb); err != nil {
		t.Fatal(err)
	}
	res, err := workspace.Sync(ctx, host, "workspace", m, tar.NewReader(&back))
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(errConflict); !errors.Is(err, errConflict) || !errors.Is(err, tarsafe.ErrUnsafe) {
		t.Errorf("Err: %v, want the conflict and the refused .outpost", err)
	}
	for name, want := range map[string]string{
		"a.txt": "two\n", "both.txt": "host\n", "both.txt" + workspace.ConflictSuffix: "sandbox\n",
		"new/n.txt": "n\n", "del.txt": "<missing>", ".outpost/.env": "SECRET=s\n",
	} {
		if got := read(host, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	// A second sync with nothing changed writes nothing and finds nothing.
	back.Reset()
	os.RemoveAll(filepath.Join(sb, ".outpost"))
	if err := tarsafe.WriteDir(ctx, &back, sb); err != nil {
		t.Fatal(err)
	}
	res, err = workspace.Sync(ctx, host, "workspace", res.Manifest, tar.NewReader(&back))
	if err != nil || res.Err(errConflict) != nil {
		t.Errorf("second sync: %v, %v", err, res.Err(errConflict))
	}
}

func TestThroughLink(t *testing.T) {
	links := map[string]bool{"a": true, "d": false}
	for name, want := range map[string]string{"a/x": "a", "d/x": "", "a": "", "b/a/x": ""} {
		if got := workspace.ThroughLink(name, links); got != want {
			t.Errorf("ThroughLink(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestCheckEntry: each link of a chain looks harmless alone; an entry
// under one the archive made, or a hard link to one, is refused.
func TestCheckEntry(t *testing.T) {
	links := map[string]bool{}
	for _, h := range []*tar.Header{
		{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "."},
		{Name: "d", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := workspace.CheckEntry(h, links); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		links[h.Name] = h.Typeflag == tar.TypeSymlink
	}
	for _, h := range []*tar.Header{
		{Name: "a/b", Typeflag: tar.TypeSymlink, Linkname: ".."},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "a/x"},
		{Name: "../up", Typeflag: tar.TypeReg},
	} {
		if err := workspace.CheckEntry(h, links); !errors.Is(err, tarsafe.ErrUnsafe) {
			t.Errorf("%s: %v, want tarsafe.ErrUnsafe", h.Name, err)
		}
	}
}

// TestManifestSnapshot: the manifest Write made describes the directory
// as snapshot.Walk does (files and links, not .git, not .outpost), and
// declines when only a walk can tell: over the limit, a directory its
// owner cannot list, a manifest Write did not make.
func TestManifestSnapshot(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a.txt": "one\n", "sub/b.sh": "#!/bin/sh\n", ".git/HEAD": "ref\n", ".outpost/.env": "K=v\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write := func() *workspace.Manifest {
		m := workspace.NewManifest()
		if err := workspace.Write(t.Context(), tar.NewWriter(io.Discard), dir, "", "", 0, 0, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	got, ok := write().Snapshot(10)
	want, err := snapshot.Walk(t.Context(), dir, 10)
	if err != nil || !ok {
		t.Fatalf("Snapshot ok %v, Walk %v", ok, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the manifest's snapshot differs from the walk (-walk +manifest):\n%s", d)
	}
	if _, ok := write().Snapshot(2); ok {
		t.Error("a snapshot over its limit is taken from the manifest")
	}
	if _, ok := workspace.NewManifest().Snapshot(10); ok {
		t.Error("a manifest Write did not make gives a snapshot")
	}
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o300); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "sub"), 0o755) })
	if os.Getuid() == 0 { // root reads it to write the archive; the sandbox's user could not list it
		if _, ok := write().Snapshot(10); ok {
			t.Error("a directory its owner cannot list is described from the manifest")
		}
	}
}
