// Package tarsafe checks, writes and extracts tar streams without letting
// any entry escape its root: no absolute names, no "..", no symbolic or
// hard links pointing outside, no devices, no setuid/setgid bits. Sandbox
// providers, the conversation store and bootstrap share it.
package tarsafe

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/bufpool"
)

// ErrUnsafe is wrapped by every refusal.
var ErrUnsafe = errors.New("unsafe archive entry")

// File is an in-memory file for Write.
type File struct {
	Name string // slash-separated, relative
	Mode fs.FileMode
	Data []byte
	// Link makes a symbolic link to Link instead of a regular file.
	Link string
	Dir  bool
}

// CleanName validates an entry name and returns it cleaned, without a
// leading "./" or trailing slash.
func CleanName(name string) (string, error) {
	n := strings.TrimPrefix(name, "./")
	n = strings.TrimSuffix(n, "/")
	if n == "" || n == "." {
		return ".", nil
	}
	if strings.ContainsRune(n, 0) || strings.Contains(n, "\\") {
		return "", fmt.Errorf("%w: %q has a forbidden character", ErrUnsafe, name)
	}
	if path.IsAbs(n) {
		return "", fmt.Errorf("%w: %q is absolute", ErrUnsafe, name)
	}
	for _, seg := range strings.Split(n, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q leaves its root", ErrUnsafe, name)
		}
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q leaves its root", ErrUnsafe, name)
	}
	return c, nil
}

// Check validates one header and normalizes it in place: a clean name,
// permission bits only (no setuid, setgid or sticky), links inside the root.
func Check(h *tar.Header) error {
	name, err := CleanName(h.Name)
	if err != nil {
		return err
	}
	h.Name = name
	h.Mode &= 0o777
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir:
	case tar.TypeSymlink:
		if h.Linkname == "" || path.IsAbs(h.Linkname) {
			return fmt.Errorf("%w: symlink %q -> %q points outside", ErrUnsafe, h.Name, h.Linkname)
		}
		target := path.Join(path.Dir(name), h.Linkname)
		if target == ".." || strings.HasPrefix(target, "../") {
			return fmt.Errorf("%w: symlink %q -> %q points outside", ErrUnsafe, h.Name, h.Linkname)
		}
	case tar.TypeLink:
		if _, err := CleanName(h.Linkname); err != nil || h.Linkname == "" {
			return fmt.Errorf("%w: hard link %q -> %q points outside", ErrUnsafe, h.Name, h.Linkname)
		}
	case tar.TypeXGlobalHeader, tar.TypeXHeader:
	default:
		return fmt.Errorf("%w: %q has type %q (devices, fifos and others are refused)", ErrUnsafe, h.Name, string(h.Typeflag))
	}
	return nil
}

// Filter returns a tar stream with the entries of r, each checked by
// Check. The first unsafe entry ends the stream with an error wrapping
// ErrUnsafe, read by the consumer as a failed read.
func Filter(r io.Reader) io.ReadCloser { return filter(r, false) }

// FilterOut is Filter for streams read out of a sandbox: link entries that
// point outside the stream are dropped instead of ending it. Names that
// escape, devices and other refusals still end it.
func FilterOut(r io.Reader) io.ReadCloser { return filter(r, true) }

func filter(r io.Reader, dropLinks bool) io.ReadCloser {
	return Rewrite(r, func(h *tar.Header) (bool, error) {
		if dropLinks && (h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink) {
			c := *h
			if Check(&c) != nil {
				if _, err := CleanName(h.Name); err == nil {
					return false, nil // a link pointing outside: dropped
				}
			}
		}
		return true, nil
	})
}

// Write writes files as a tar stream.
func Write(w io.Writer, files []File) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: int64(f.Mode.Perm()), ModTime: now, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o700
			}
		case f.Link != "":
			h.Typeflag = tar.TypeSymlink
			h.Linkname = f.Link
			h.Mode = 0o777
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Data))
			if h.Mode == 0 {
				h.Mode = 0o600
			}
		}
		if err := Check(h); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// Read reads a whole tar stream into memory, checking every entry. Names
// are returned relative to the stream's root; maxBytes bounds the total
// size of regular files (0 = 1 GiB).
func Read(r io.Reader, maxBytes int64) ([]File, error) {
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	tr := tar.NewReader(r)
	var out []File
	var total int64
	for {
		h, err := Next(tr)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if err := Check(h); err != nil {
			return nil, err
		}
		f := File{Name: h.Name, Mode: fs.FileMode(h.Mode).Perm()}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Dir = true
		case tar.TypeSymlink:
			f.Link = h.Linkname
		case tar.TypeLink:
			return nil, fmt.Errorf("%w: hard link %q is not supported here", ErrUnsafe, h.Name)
		default:
			total += h.Size
			if total > maxBytes {
				return nil, fmt.Errorf("archive larger than %d bytes", maxBytes)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", h.Name, err)
			}
			f.Data = data
		}
		out = append(out, f)
	}
}

// Extract extracts a tar stream into dir, which must exist, through an
// os.Root so that no entry — and no symbolic link met on the way — can
// write outside dir. Existing files are replaced.
func Extract(r io.Reader, dir string) error { return extract(r, dir, false) }

// ExtractOwned is Extract for a process with CAP_CHOWN laying out files
// for another user (a docker sandbox's init, before it becomes that
// user): every entry also gets its header's owner (Uid, Gid), regular
// files, directories and symbolic links their modification time, and a directory that
// exists already takes its entry's mode. Directories' modes, times and
// owners are set once every entry is written, the last entry first, so
// children before their parents: until then every directory is the
// extracting user's and writable by it, and no other capability (to
// search or write another user's directory) is needed.
func ExtractOwned(r io.Reader, dir string) error { return extract(r, dir, true) }

// owned is an entry whose owner and time ExtractOwned sets last.
type owned struct {
	name     string
	uid, gid int
	mtime    time.Time
	link     bool // a symbolic or hard link
	symlink  bool
	dir      bool
	mode     fs.FileMode // a directory's
}

func extract(r io.Reader, dir string, own bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var done []owned
	tr := tar.NewReader(r)
	for {
		h, err := Next(tr)
		if err == io.EOF {
			if own {
				return setOwners(root, done)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := Check(h); err != nil {
			return err
		}
		if h.Name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		if parent := path.Dir(h.Name); parent != "." {
			if err := root.MkdirAll(parent, 0o700); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if mode == 0 {
				mode = 0o700
			}
			if own {
				// Its mode is set last: until then its entries are
				// written into it whatever it says.
				if err := root.MkdirAll(h.Name, 0o700); err != nil {
					return err
				}
				if err := root.Chmod(h.Name, 0o700); err != nil {
					return err
				}
			} else if err := root.MkdirAll(h.Name, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(h.Name)
			if err := root.Symlink(h.Linkname, h.Name); err != nil {
				return err
			}
		case tar.TypeLink:
			_ = root.Remove(h.Name)
			if err := root.Link(h.Linkname, h.Name); err != nil {
				return err
			}
		default:
			// Remove first so a symlink at the name is replaced, not followed.
			if fi, err := root.Lstat(h.Name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				_ = root.Remove(h.Name)
			}
			f, err := root.OpenFile(h.Name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, cerr := bufpool.Copy(f, tr)
			if err := errors.Join(cerr, f.Chmod(mode), f.Close()); err != nil {
				return fmt.Errorf("writing %s: %w", h.Name, err)
			}
		}
		if own {
			link := h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink
			done = append(done, owned{name: h.Name, uid: h.Uid, gid: h.Gid, mtime: h.ModTime, symlink: h.Typeflag == tar.TypeSymlink, link: link, dir: h.Typeflag == tar.TypeDir, mode: mode})
		}
	}
}

// setOwners gives ExtractOwned's entries their times and owners, the
// last entry first.
func setOwners(root *os.Root, done []owned) error {
	for i := len(done) - 1; i >= 0; i-- {
		e := done[i]
		if e.dir {
			if err := root.Chmod(e.name, e.mode); err != nil {
				return err
			}
		}
		switch {
		case e.mtime.IsZero():
		case e.symlink:
			if err := linkTimes(root, e.name, e.mtime); err != nil {
				return err
			}
		case !e.link:
			if err := root.Chtimes(e.name, e.mtime, e.mtime); err != nil {
				return err
			}
		}
		if err := root.Lchown(e.name, e.uid, e.gid); err != nil {
			return fmt.Errorf("owning %s: %w", e.name, err)
		}
	}
	return nil
}

// Whole checks that WriteDir would archive all of root as it is now:
// every regular file can be opened for reading, every directory listed,
// and the tree holds nothing WriteDir leaves out (a device, a fifo, a
// socket). Its error names the first path that fails. The skip paths are
// left out as WriteDir leaves them out.
func Whole(root string, skip ...string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if skipped(p, skip) {
			return skipEntry(d)
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			return f.Close()
		case fi.IsDir(), fi.Mode()&fs.ModeSymlink != 0:
			return nil
		default:
			return fmt.Errorf("%s: a %v is not archived", p, fi.Mode().Type())
		}
	})
}

// WriteDir writes path (a file or a directory tree) as a tar stream, with
// entries named relative to path's parent directory, as `docker cp` does.
// Symbolic links are stored as links and never followed; other special
// files are skipped, and so is each path in skip (as given to WalkDir:
// root joined with a relative path), with all it holds, unread: the
// shim's tar leaves a workspace's .outpost out this way (a read-only mount
// outpost hides it behind, which the sandbox's user may not list).
func WriteDir(ctx context.Context, w io.Writer, root string, skip ...string) error {
	tw := tar.NewWriter(w)
	parent := filepath.Dir(root)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if skipped(p, skip) {
			return skipEntry(d)
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(parent, p)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular(), fi.IsDir():
		default:
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, h.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s changed while being copied: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// skipped reports whether the walked path p is one of skip.
func skipped(p string, skip []string) bool {
	for _, s := range skip {
		if p == filepath.Clean(s) {
			return true
		}
	}
	return false
}

// skipEntry leaves a skipped entry out of a walk: a directory with all it
// holds (d is nil when it could not be read: nothing more is visited).
func skipEntry(d fs.DirEntry) error {
	if d != nil && d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

// MaxGlobalHeaders bounds the global headers Next skips in a row.
const MaxGlobalHeaders = 16

// ErrGlobalHeaders is an archive with more than MaxGlobalHeaders global
// headers in a row.
var ErrGlobalHeaders = errors.New("too many global headers")

// Entries yields tr's entries as Next reads them until the end, checking
// ctx before each; it ends after yielding an error (ctx's, or Next's) with
// a nil header.
func Entries(ctx context.Context, tr *tar.Reader) iter.Seq2[*tar.Header, error] {
	return func(yield func(*tar.Header, error) bool) {
		for {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			h, err := Next(tr)
			if err == io.EOF {
				return
			}
			if !yield(h, err) || err != nil {
				return
			}
		}
	}
}

// Next returns tr's next entry, skipping global headers (they describe no
// file); io.EOF at the end. A read error is wrapped "reading archive".
func Next(tr *tar.Reader) (*tar.Header, error) {
	for range MaxGlobalHeaders + 1 {
		h, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				err = fmt.Errorf("reading archive: %w", err)
			}
			return nil, err
		}
		if h.Typeflag != tar.TypeXGlobalHeader {
			return h, nil
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrUnsafe, ErrGlobalHeaders)
}

// Reader reads a tar stream entry by entry as Extract reads it: Next
// skips global headers (Next, the function) and checks every header
// (Check), so a caller meets only safe entries, or the error of the first
// unsafe one.
type Reader struct{ *tar.Reader }

// NewReader reads r's entries, checked.
func NewReader(r io.Reader) Reader { return Reader{tar.NewReader(r)} }

// Next is the next entry, checked; io.EOF at the end.
func (r Reader) Next() (*tar.Header, error) {
	h, err := Next(r.Reader)
	if err == nil {
		err = Check(h)
	}
	return h, err
}
