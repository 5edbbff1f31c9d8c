package tarsafe

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckTree(t *testing.T) {
	cases := []struct {
		name  string
		build func(dir string) error
		ok    bool
	}{
		{"plain", func(d string) error {
			os.MkdirAll(filepath.Join(d, "a/b"), 0o755)
			return os.WriteFile(filepath.Join(d, "a/b/f"), []byte("x"), 0o755)
		}, true},
		{"link inside", func(d string) error {
			os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
			return os.Symlink("f", filepath.Join(d, "l"))
		}, true},
		{"dangling link inside", func(d string) error { return os.Symlink("nowhere", filepath.Join(d, "l")) }, true},
		{"absolute link", func(d string) error { return os.Symlink("/etc/passwd", filepath.Join(d, "l")) }, false},
		{"link up", func(d string) error { return os.Symlink("../x", filepath.Join(d, "l")) }, false},
		{"link chain out", func(d string) error {
			os.MkdirAll(filepath.Join(d, "d"), 0o755)
			os.Symlink("..", filepath.Join(d, "d/e"))
			return os.Symlink("d/e/..", filepath.Join(d, "out"))
		}, false},
		{"fifo", func(d string) error { return mkfifo(filepath.Join(d, "p")) }, false},
		{"setgid dir", func(d string) error {
			os.Mkdir(filepath.Join(d, "g"), 0o755)
			return os.Chmod(filepath.Join(d, "g"), 0o755|os.ModeSetgid)
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.build(dir); err != nil {
				t.Skip("cannot build the case here:", err)
			}
			err := CheckTree(dir)
			if c.ok && err != nil {
				t.Errorf("CheckTree: %v", err)
			}
			if !c.ok && !errors.Is(err, ErrUnsafe) {
				t.Errorf("CheckTree = %v, want ErrUnsafe", err)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range []string{"package/", "package/a", "package/../evil", "other"} {
		typ := byte(tar.TypeReg)
		if n[len(n)-1] == '/' {
			typ = tar.TypeDir
		}
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: typ, Mode: 0o644})
	}
	tw.Close()
	var seen []string
	r := Rewrite(&buf, func(h *tar.Header) (bool, error) {
		seen = append(seen, h.Name)
		if h.Name == "other" {
			return false, nil
		}
		return true, nil
	})
	defer r.Close()
	tr := tar.NewReader(r)
	var got []string
	var err error
	for {
		var h *tar.Header
		if h, err = tr.Next(); err != nil {
			break
		}
		got = append(got, h.Name)
	}
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("err = %v, want ErrUnsafe for package/../evil", err)
	}
	if len(got) != 2 || got[0] != "package" || got[1] != "package/a" {
		t.Errorf("entries = %q", got)
	}
}

// TestWalk: every entry in lexical order with its path relative to base
// (not root) and its own information (a link's, not its target's), and
// fs.SkipDir from fn skipping a directory.
func TestWalk(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "pkg")
	for _, d := range []string{"a", "skip"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "a/f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "skip/g"), []byte("y"), 0o644)
	os.Symlink("a", filepath.Join(root, "l"))
	var got []string
	err := Walk(root, base, func(p, rel string, fi fs.FileInfo) error {
		if p != filepath.Join(base, rel) {
			t.Errorf("path %s, rel %s", p, rel)
		}
		got = append(got, filepath.ToSlash(rel)+" "+fi.Mode().Type().String())
		if fi.Name() == "skip" {
			return fs.SkipDir
		}
		return nil
	})
	want := "pkg d---------,pkg/a d---------,pkg/a/f ----------,pkg/l L---------,pkg/skip d---------"
	if err != nil || strings.Join(got, ",") != want {
		t.Errorf("walked %q, %v; want %q", strings.Join(got, ","), err, want)
	}
	if err := Walk(filepath.Join(base, "none"), base, func(string, string, fs.FileInfo) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing root: %v", err)
	}
}
