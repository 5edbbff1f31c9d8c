package tarsafe

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/outposthq/outpost/internal/bufpool"
)

// Rewrite returns a tar stream with the entries of r as edit leaves them:
// edit may rename an entry (its Name and Linkname) before it is checked,
// drop it by returning false, or end the stream with an error. Each kept
// entry is then checked by Check; the first unsafe one ends the stream
// with an error wrapping ErrUnsafe. Closing the returned reader stops the
// copy.
func Rewrite(r io.Reader, edit func(h *tar.Header) (keep bool, err error)) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tr := tar.NewReader(r)
		tw := tar.NewWriter(pw)
		for {
			h, err := Next(tr)
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			keep, err := edit(h)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if !keep {
				continue
			}
			if err := Check(h); err != nil {
				pw.CloseWithError(err)
				return
			}
			if err := tw.WriteHeader(h); err != nil {
				pw.CloseWithError(err)
				return
			}
			if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
				if _, err := bufpool.Copy(tw, tr); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
		}
	}()
	return pr
}

// Walk walks the tree at root as filepath.WalkDir does (lexical order,
// links not followed, the first error ends it), calling fn with each
// entry's path, that path relative to base, and its information (Lstat's).
// fn's fs.SkipDir and fs.SkipAll work as WalkDir's.
func Walk(root, base string, fn func(p, rel string, fi fs.FileInfo) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return fn(p, rel, fi)
	})
}

// CheckTree checks a directory tree that was extracted from an archive:
// every entry is a directory, a regular file or a symbolic link; no mode
// has the setuid, setgid or sticky bit; and every symbolic link resolves
// inside dir, following any chain of links (a link that goes nowhere is
// allowed, one that leaves dir on the way is not). Check alone judges
// each link by its own text; a chain of individually harmless links can
// still lead out, which only the extracted tree shows. Errors wrap
// ErrUnsafe.
func CheckTree(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return Walk(dir, dir, func(p, rel string, fi fs.FileInfo) error {
		m := fi.Mode()
		switch {
		case m&fs.ModeSymlink != 0:
			if _, err := root.Stat(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
				target, _ := os.Readlink(p)
				return fmt.Errorf("%w: link %q -> %q resolves outside: %v", ErrUnsafe, filepath.ToSlash(rel), target, err)
			}
		case m.IsDir(), m.IsRegular():
		default:
			return fmt.Errorf("%w: %q is a %v", ErrUnsafe, filepath.ToSlash(rel), m.Type())
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			return fmt.Errorf("%w: %q has mode %v", ErrUnsafe, filepath.ToSlash(rel), m)
		}
		return nil
	})
}
