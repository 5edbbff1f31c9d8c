package tarsafe

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestExtractOwned extracts, as the test's own user, an archive whose
// directories forbid writing into them: their modes come last, so their
// entries are still written; times and owners are the headers'.
func TestExtractOwned(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "exists"), 0o755); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Uid, h.Gid, h.ModTime, h.Size = uid, gid, mtime, int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "exists/", Typeflag: tar.TypeDir, Mode: 0o711}, "")
	add(&tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o500}, "")
	add(&tar.Header{Name: "ro/f", Typeflag: tar.TypeReg, Mode: 0o400}, "hello")
	add(&tar.Header{Name: "ro/sub/", Typeflag: tar.TypeDir, Mode: 0o500}, "")
	add(&tar.Header{Name: "ro/sub/g", Typeflag: tar.TypeReg, Mode: 0o644}, "g")
	add(&tar.Header{Name: "ro/link", Typeflag: tar.TypeSymlink, Linkname: "f"}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ExtractOwned(&buf, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o700) })
	})
	for name, mode := range map[string]os.FileMode{"exists": 0o711 | os.ModeDir, "ro": 0o500 | os.ModeDir, "ro/f": 0o400, "ro/sub": 0o500 | os.ModeDir, "ro/sub/g": 0o644} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), mode)
		}
		if !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", name, fi.ModTime(), mtime)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s: owner %d:%d", name, st.Uid, st.Gid)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ro/link")); err != nil || string(b) != "hello" {
		t.Errorf("link: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "ro/link")); err != nil || !fi.ModTime().Equal(mtime) {
		t.Errorf("link's own mtime: %v, %v", fi, err)
	}

	// An unsafe entry is refused, as by Extract.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = tw.Close()
	if err := ExtractOwned(&buf, t.TempDir()); !errors.Is(err, ErrUnsafe) {
		t.Errorf("escaping entry: %v", err)
	}
}
