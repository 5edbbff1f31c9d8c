package checkpoint_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// tarReader reads a stream as the engine does (tarsafe.Reader).
func tarReader(b []byte) checkpoint.TarReader { return tarsafe.NewReader(bytes.NewReader(b)) }

// viaDirectory is what a workspace copied out of a sandbox recorded before
// SnapshotTar: its tar stream extracted into a directory, then Snapshot.
func viaDirectory(t *testing.T, stream []byte, o *checkpoint.Options) (checkpoint.Tree, error) {
	t.Helper()
	tmp := t.TempDir()
	if err := tarsafe.Extract(bytes.NewReader(stream), tmp); err != nil {
		return checkpoint.Tree{}, err
	}
	des, err := os.ReadDir(tmp)
	if err != nil || len(des) != 1 {
		t.Fatalf("extracted %d entries, %v", len(des), err)
	}
	return checkpoint.Snapshot(context.Background(), checkpoint.NewMemory(), filepath.Join(tmp, des[0].Name()), o)
}

// tarOf is the stream a lease's CopyOut of dir gives (sandbox.Lease:
// links that point outside dropped).
func tarOf(t *testing.T, dir string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tarsafe.WriteDir(context.Background(), &b, dir); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(tarsafe.FilterOut(&b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameBothWays checks that SnapshotTar of dir's stream records what the
// directory way records: the same tree, counts and error.
func sameBothWays(t *testing.T, dir string, o *checkpoint.Options) checkpoint.Tree {
	t.Helper()
	stream := tarOf(t, dir)
	want, werr := viaDirectory(t, stream, o)
	got, gerr := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarReader(stream), o, checkpoint.NewBudget(64<<20, 64<<20))
	if (werr == nil) != (gerr == nil) || werr != nil && !strings.HasSuffix(gerr.Error(), werr.Error()) || errors.Is(werr, checkpoint.ErrTooLarge) != errors.Is(gerr, checkpoint.ErrTooLarge) {
		t.Fatalf("error: from the stream %v, through a directory %v", gerr, werr)
	}
	// Written is left out: two files of one content hashed by two workers
	// at once may both be written (either way), so it varies by a little.
	if got.Hash != want.Hash || got.Files != want.Files || got.Bytes != want.Bytes {
		t.Fatalf("from the stream %+v, through a directory %+v", got, want)
	}
	return got
}

// TestSnapshotTarMatchesDirectory: a workspace's stream recorded in memory
// gives the tree, counts and errors that extracting it and recording the
// directory gives: ignore files at every level, Include, .git and the
// top-level .outpost, links, executable files, masks and the limits.
func TestSnapshotTarMatchesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "work")
	write(t, dir, map[string]string{
		"main.go":              "package main\n",
		".gitignore":           "build/\n*.log\n!keep.log\n",
		"build/out.bin":        "x",
		"build/big.bin":        strings.Repeat("b", 5000),
		"a.log":                "log",
		"keep.log":             "kept",
		"sub/.gitignore":       "secret.txt\n/only-here\n",
		"sub/secret.txt":       "s",
		"sub/only-here":        "o",
		"sub/deeper/only-here": "kept: the pattern is anchored to sub",
		"sub/ok.txt":           "ok KEY-123 ok",
		".git/config":          "[core]",
		"sub/.git/HEAD":        "ref",
		".outpost/.env":        "KEY=v",
		"deep/.outpost/x":      "kept",
		"node_modules/m/i.js":  "x",
		"link":                 "->main.go",
		"out":                  "->/etc/passwd",
		"dirlink":              "->sub",
	})
	os.Chmod(filepath.Join(dir, "main.go"), 0o755)
	os.MkdirAll(filepath.Join(dir, "empty", "dirs"), 0o755)
	mask := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("KEY-123"), []byte("*******")) }
	tr := sameBothWays(t, dir, &checkpoint.Options{Include: []string{"build/out.bin"}, Mask: mask})
	if tr.Files != 11 {
		t.Errorf("files kept: %d, want 11", tr.Files)
	}
	sameBothWays(t, dir, nil)
	// The limits: a kept file over MaxFile, more files than MaxFiles, more
	// bytes than MaxBytes; an ignored file over MaxFile is no matter.
	sameBothWays(t, dir, &checkpoint.Options{MaxFile: 100})
	sameBothWays(t, dir, &checkpoint.Options{MaxFile: 10, Include: []string{"build/big.bin"}})
	sameBothWays(t, dir, &checkpoint.Options{MaxFiles: 3})
	sameBothWays(t, dir, &checkpoint.Options{MaxBytes: 20})
}

// TestSnapshotTarRandom: random workspaces (names, nesting, ignore files,
// links, modes) give the same tree both ways.
func TestSnapshotTarRandom(t *testing.T) {
	names := []string{"a", "b.go", "c.log", ".gitignore", "build", "keep.log", ".git", ".outpost", "x y", "é"}
	rules := []string{"*.log", "!keep.log", "build/", "/a", "b*", "**/x y", "é/"}
	for seed := range 25 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		dir := filepath.Join(t.TempDir(), "ws")
		files := map[string]string{}
		for range 5 + r.IntN(30) {
			var parts []string
			for range 1 + r.IntN(3) {
				parts = append(parts, names[r.IntN(len(names))])
			}
			p := strings.Join(parts, "/")
			switch {
			case strings.HasSuffix(p, ".gitignore"):
				var ls []string
				for range 1 + r.IntN(3) {
					ls = append(ls, rules[r.IntN(len(rules))])
				}
				files[p] = strings.Join(ls, "\n") + "\n"
			case r.IntN(8) == 0:
				files[p] = "->" + names[r.IntN(len(names))]
			default:
				files[p] = strings.Repeat(p, 1+r.IntN(20))
			}
		}
		// A name is a file or a directory, not both: keep the deepest.
		for p := range files {
			for q := range files {
				if strings.HasPrefix(q, p+"/") {
					delete(files, p)
				}
			}
		}
		write(t, dir, files)
		n := 0
		filepath.Walk(dir, func(p string, fi os.FileInfo, _ error) error {
			if fi != nil && fi.Mode().IsRegular() && n%3 == 0 {
				os.Chmod(p, 0o744)
			}
			n++
			return nil
		})
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			sameBothWays(t, dir, &checkpoint.Options{Include: []string{"c.log"}})
		})
	}
}

// stream writes a tar stream of hand-made headers (content: Size bytes of
// "x").
func stream(t *testing.T, hs ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestSnapshotTarSpills: what the stream way leaves to the directory's
// rules is ErrSpill, never a different tree: content over the budget, a
// hard link, a name given twice, a link as .gitignore, a directory or a
// file its owner cannot read, a path through a file.
func TestSnapshotTarSpills(t *testing.T) {
	dir := func(name string, mode int64) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}
	}
	file := func(name string, size, mode int64) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: mode}
	}
	cases := map[string][]tar.Header{
		"over the budget":       {dir("w/", 0o755), file("w/a", 600, 0o644), file("w/b", 600, 0o644)},
		"a hard link":           {dir("w/", 0o755), file("w/a", 1, 0o644), {Name: "w/b", Typeflag: tar.TypeLink, Linkname: "w/a"}},
		"a name twice":          {dir("w/", 0o755), file("w/a", 1, 0o644), file("w/a", 2, 0o644)},
		"a linked ignore":       {dir("w/", 0o755), file("w/i", 1, 0o644), {Name: "w/.gitignore", Typeflag: tar.TypeSymlink, Linkname: "i"}},
		"a closed dir":          {dir("w/", 0o755), dir("w/d/", 0o311), file("w/d/a", 1, 0o644)},
		"an unreadable file":    {dir("w/", 0o755), file("w/a", 1, 0o200)},
		"a path through a file": {dir("w/", 0o755), file("w/a", 1, 0o644), file("w/a/b", 1, 0o644)},
	}
	for name, hs := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarReader(stream(t, hs...)), nil, checkpoint.NewBudget(1000, 1000))
			if !errors.Is(err, checkpoint.ErrSpill) {
				t.Fatalf("got %v, want ErrSpill", err)
			}
		})
	}
	ok := stream(t, dir("w/", 0o755), file("w/a", 600, 0o644))
	if _, err := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarReader(ok), nil, checkpoint.NewBudget(1000, 1000)); err != nil {
		t.Fatalf("a stream within the budget: %v", err)
	}
}

// TestSnapshotTarRefuses: an unsafe entry, a broken stream and a stream
// that is not one directory are errors, not spills.
func TestSnapshotTarRefuses(t *testing.T) {
	escape := stream(t, tar.Header{Name: "w/../../x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	whole := stream(t, tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "w/a", Typeflag: tar.TypeReg, Size: 100, Mode: 0o644})
	two := stream(t, tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "v", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	fifo := stream(t, tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "w/p", Typeflag: tar.TypeFifo, Mode: 0o644})
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"an escaping name": {escape, "leaves its root"},
		"a cut stream":     {whole[:700], "unexpected EOF"},
		"two top entries":  {two, "2 top-level entries"},
		"a fifo":           {fifo, "devices, fifos and others are refused"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarReader(c.b), nil, checkpoint.NewBudget(1<<20, 1<<20))
			if err == nil || errors.Is(err, checkpoint.ErrSpill) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestSnapshotTarSharedBudget: calls sharing a Budget hold at most its
// total at once: one that would go over spills, and what a call took is
// given back when it returns.
func TestSnapshotTarSharedBudget(t *testing.T) {
	b := checkpoint.NewBudget(1000, 800)
	s := func(size int64) []byte {
		return stream(t, tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "w/a", Typeflag: tar.TypeReg, Size: size, Mode: 0o644})
	}
	snap := func(size int64) error {
		_, err := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarReader(s(size)), nil, b)
		return err
	}
	if err := snap(900); !errors.Is(err, checkpoint.ErrSpill) {
		t.Fatalf("a call over the per-call bound: %v, want ErrSpill", err)
	}
	for range 3 { // what each call took is given back
		if err := snap(800); err != nil {
			t.Fatalf("a call within the bounds: %v", err)
		}
	}
	// A call reading while another holds most of the budget spills.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := checkpoint.SnapshotTar(context.Background(), checkpoint.NewMemory(), tarsafe.NewReader(pr), nil, b)
		done <- err
	}()
	tw := tar.NewWriter(pw)
	tw.WriteHeader(&tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "w/a", Typeflag: tar.TypeReg, Size: 700, Mode: 0o644})
	tw.Write(bytes.Repeat([]byte("x"), 700))
	tw.Flush()
	// The first call has taken 700 once its next header is asked for: the
	// second's 400 is over the 300 left.
	tw.WriteHeader(&tar.Header{Name: "w/b", Typeflag: tar.TypeReg, Size: 0, Mode: 0o644})
	tw.Flush()
	if err := snap(400); !errors.Is(err, checkpoint.ErrSpill) {
		t.Errorf("a call while another holds 700 of 1000: %v, want ErrSpill", err)
	}
	tw.Close()
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	if err := snap(800); err != nil {
		t.Fatalf("after both returned: %v", err)
	}
}
