package memsandbox

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// maxLinks bounds the symbolic links followed while resolving one name.
const maxLinks = 40

// node is a directory, regular file or symbolic link. Hard links are two
// directory entries pointing to the same node. A file's data slice is
// replaced on every write, never modified in place, so snapshots can share
// it.
type node struct {
	mode    fs.FileMode // type bits, permissions and setuid/setgid/sticky
	data    []byte
	target  string           // symbolic link target
	entries map[string]*node // directory entries
	mtime   time.Time
}

func (n *node) isDir() bool     { return n.mode.IsDir() }
func (n *node) isSymlink() bool { return n.mode&fs.ModeSymlink != 0 }

func newDir(perm fs.FileMode) *node {
	return &node{mode: fs.ModeDir | perm, entries: map[string]*node{}, mtime: time.Now()}
}

// tree is one sandbox's file system. Once the sandbox is released or has
// vanished every operation fails with gone.
type tree struct {
	mu   sync.Mutex
	root *node
	gone error
}

func newTree() *tree { return &tree{root: newDir(0o755)} }

// close makes every later operation fail with err and frees the files.
func (t *tree) close(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone == nil {
		t.gone = err
		t.root = nil
	}
}

// lock takes the tree's lock, reporting gone if the tree is closed. The
// caller unlocks on success only.
func (t *tree) lock() error {
	t.mu.Lock()
	if t.gone != nil {
		err := t.gone
		t.mu.Unlock()
		return err
	}
	return nil
}

// get returns the node at a canonical absolute path, without following
// links, or nil.
func (t *tree) get(p string) *node {
	n := t.root
	for _, c := range split(p) {
		if n == nil || !n.isDir() {
			return nil
		}
		n = n.entries[c]
	}
	return n
}

// split returns the components of a slash-separated name, without empty
// and "." ones.
func split(name string) []string {
	var cs []string
	for _, c := range strings.Split(name, "/") {
		if c != "" && c != "." {
			cs = append(cs, c)
		}
	}
	return cs
}

// walkMode says how walk resolves a name.
type walkMode struct {
	// follow: follow a symbolic link in the last component (links in the
	// other components are always followed).
	follow bool
	// jail, when not empty, is a canonical directory resolution may not
	// leave: ".." above it and absolute link targets are refused with
	// an error wrapping tarsafe.ErrUnsafe, as with os.Root.
	jail string
	// mkdir creates missing directories, the last component included,
	// with permissions perm.
	mkdir bool
	perm  fs.FileMode
}

// walk resolves name from the canonical directory base (an absolute name
// starts from the root, or is refused in a jail). It returns the canonical
// path of the last component and its node, nil when only the last
// component is missing. Errors are bare (syscall.ENOENT...); callers put
// them in an fs.PathError.
func (t *tree) walk(base, name string, m walkMode) (string, *node, error) {
	if path.IsAbs(name) {
		if m.jail != "" {
			return "", nil, fmt.Errorf("%w: %q is absolute", tarsafe.ErrUnsafe, name)
		}
		base = "/"
	}
	cur := base
	curNode := t.get(cur)
	if curNode == nil {
		return "", nil, syscall.ENOENT
	}
	comps := split(name)
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		if !curNode.isDir() {
			return "", nil, syscall.ENOTDIR
		}
		if c == ".." {
			if m.jail != "" && cur == m.jail {
				return "", nil, fmt.Errorf("%w: %q leads outside %s", tarsafe.ErrUnsafe, name, m.jail)
			}
			cur = path.Dir(cur)
			curNode = t.get(cur)
			continue
		}
		next := path.Join(cur, c)
		child := curNode.entries[c]
		if child == nil {
			switch {
			case m.mkdir:
				child = newDir(m.perm)
				curNode.entries[c] = child
				curNode.mtime = time.Now()
			case len(comps) == 0:
				return next, nil, nil
			default:
				return "", nil, syscall.ENOENT
			}
		}
		if child.isSymlink() && (len(comps) > 0 || m.follow || m.mkdir) {
			if links++; links > maxLinks {
				return "", nil, syscall.ELOOP
			}
			if path.IsAbs(child.target) {
				if m.jail != "" {
					return "", nil, fmt.Errorf("%w: %q goes through a link to %s", tarsafe.ErrUnsafe, name, child.target)
				}
				cur, curNode = "/", t.root
			}
			comps = append(split(child.target), comps...)
			continue
		}
		cur, curNode = next, child
	}
	if m.mkdir && !curNode.isDir() {
		return "", nil, syscall.ENOTDIR
	}
	return cur, curNode, nil
}

// within reports whether the canonical path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// fileInfo is a snapshot of a node's metadata.
type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi fileInfo) ModTime() time.Time { return fi.mtime }
func (fi fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi fileInfo) Sys() any           { return nil }

func infoOf(name string, n *node) fileInfo {
	size := int64(len(n.data))
	if n.isSymlink() {
		size = int64(len(n.target))
	}
	return fileInfo{name: name, size: size, mode: n.mode, mtime: n.mtime}
}

// FS is a view of a sandbox's files, resolving relative names from a
// directory (a program's working directory). Symbolic links resolve inside
// the sandbox: an absolute target starts from the sandbox's root. Errors
// are *fs.PathError, classified as os errors are (errors.Is(err,
// fs.ErrNotExist)...). After the sandbox is released every method fails
// with sandbox.ErrClosed; after it vanished, with ErrVanished.
type FS struct {
	t   *tree
	dir string
}

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// do runs f with the tree locked, wrapping its error in a PathError.
func (f *FS) do(op, name string, fn func() error) error {
	if err := f.t.lock(); err != nil {
		return pathErr(op, name, err)
	}
	defer f.t.mu.Unlock()
	return pathErr(op, name, fn())
}

// find resolves name from base, following links, to an existing
// directory (dir) or an existing node of another kind (!dir); the tree
// is locked.
func (t *tree) find(base, name string, dir bool) (*node, error) {
	_, n, err := t.walk(base, name, walkMode{follow: true})
	switch {
	case err != nil:
		return nil, err
	case n == nil:
		return nil, syscall.ENOENT
	case dir && !n.isDir():
		return nil, syscall.ENOTDIR
	case !dir && n.isDir():
		return nil, syscall.EISDIR
	}
	return n, nil
}

// Dir returns the directory relative names start from.
func (f *FS) Dir() string { return f.dir }

// ReadFile returns the contents of the file name.
func (f *FS) ReadFile(name string) ([]byte, error) {
	var data []byte
	err := f.do("open", name, func() error {
		n, err := f.t.find(f.dir, name, false)
		if err != nil {
			return err
		}
		data = slices.Clone(n.data)
		return nil
	})
	return data, err
}

// WriteFile writes data to the file name, creating it with perm if needed
// (its directory must exist); an existing file keeps its permissions, as
// with os.WriteFile.
func (f *FS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	return f.do("open", name, func() error {
		p, n, err := f.t.walk(f.dir, name, walkMode{follow: true})
		switch {
		case err != nil:
			return err
		case n == nil:
			parent := f.t.get(path.Dir(p))
			parent.entries[path.Base(p)] = &node{mode: perm & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), data: slices.Clone(data), mtime: time.Now()}
			parent.mtime = time.Now()
		case n.isDir():
			return syscall.EISDIR
		default:
			n.data = slices.Clone(data)
			n.mtime = time.Now()
		}
		return nil
	})
}

// MkdirAll creates the directory name and any missing parents with perm.
func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	return f.do("mkdir", name, func() error {
		_, _, err := f.t.walk(f.dir, name, walkMode{mkdir: true, perm: perm.Perm()})
		return err
	})
}

// Stat describes the file name, following a symbolic link.
func (f *FS) Stat(name string) (fs.FileInfo, error) { return f.stat("stat", name, true) }

// Lstat describes the file name; a symbolic link is described, not
// followed.
func (f *FS) Lstat(name string) (fs.FileInfo, error) { return f.stat("lstat", name, false) }

func (f *FS) stat(op, name string, follow bool) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := f.do(op, name, func() error {
		p, n, err := f.t.walk(f.dir, name, walkMode{follow: follow})
		if err != nil {
			return err
		}
		if n == nil {
			return syscall.ENOENT
		}
		fi = infoOf(path.Base(p), n)
		return nil
	})
	return fi, err
}

// Symlink creates newname as a symbolic link to oldname.
func (f *FS) Symlink(oldname, newname string) error {
	return f.do("symlink", newname, func() error {
		p, n, err := f.t.walk(f.dir, newname, walkMode{})
		switch {
		case err != nil:
			return err
		case n != nil:
			return syscall.EEXIST
		}
		parent := f.t.get(path.Dir(p))
		parent.entries[path.Base(p)] = &node{mode: fs.ModeSymlink | 0o777, target: oldname, mtime: time.Now()}
		return nil
	})
}

// Remove removes the file, link or empty directory name.
func (f *FS) Remove(name string) error {
	return f.do("remove", name, func() error {
		p, n, err := f.t.walk(f.dir, name, walkMode{})
		switch {
		case err != nil:
			return err
		case n == nil:
			return syscall.ENOENT
		case p == "/":
			return syscall.EBUSY
		case n.isDir() && len(n.entries) > 0:
			return syscall.ENOTEMPTY
		}
		parent := f.t.get(path.Dir(p))
		delete(parent.entries, path.Base(p))
		parent.mtime = time.Now()
		return nil
	})
}

// ReadDir lists the directory name, sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	var des []fs.DirEntry
	err := f.do("readdir", name, func() error {
		n, err := f.t.find(f.dir, name, true)
		if err != nil {
			return err
		}
		for c, child := range n.entries {
			des = append(des, fs.FileInfoToDirEntry(infoOf(c, child)))
		}
		sort.Slice(des, func(i, j int) bool { return des[i].Name() < des[j].Name() })
		return nil
	})
	return des, err
}

// mkdirAll creates the absolute directory dir and returns its canonical
// path.
func (t *tree) mkdirAll(dir string, perm fs.FileMode) (string, error) {
	if err := t.lock(); err != nil {
		return "", err
	}
	defer t.mu.Unlock()
	p, _, err := t.walk("/", dir, walkMode{mkdir: true, perm: perm})
	return p, pathErr("mkdir", dir, err)
}

// extract applies one checked tar entry below the canonical directory
// dest, never leaving it: links met on the way are followed only while
// they stay inside, and a link whose target leads outside is refused.
// Parents are created with mode 0700; an existing file at the entry's name
// is replaced (a regular file in place, keeping its hard links), never
// followed.
func (t *tree) extract(dest string, h *tar.Header, data []byte) error {
	if err := t.lock(); err != nil {
		return err
	}
	defer t.mu.Unlock()
	jail := walkMode{jail: dest}
	parentPath, parent, err := t.walk(dest, path.Dir(h.Name), walkMode{jail: dest, follow: true, mkdir: true, perm: 0o700})
	if err != nil {
		return pathErr("extract", h.Name, err)
	}
	base := path.Base(h.Name)
	existing := parent.entries[base]
	mode := fs.FileMode(h.Mode).Perm()
	now := time.Now()
	put := func(n *node) error {
		if existing != nil && existing.isDir() {
			return pathErr("extract", h.Name, syscall.EISDIR)
		}
		parent.entries[base] = n
		parent.mtime = now
		return nil
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if existing != nil && existing.isSymlink() {
			// Like MkdirAll: a link to a directory inside is fine.
			_, n, err := t.walk(parentPath, base, walkMode{jail: dest, follow: true})
			if err != nil {
				return pathErr("extract", h.Name, err)
			}
			if n == nil || !n.isDir() {
				return pathErr("extract", h.Name, syscall.ENOTDIR)
			}
			return nil
		}
		if existing != nil {
			if !existing.isDir() {
				return pathErr("extract", h.Name, syscall.EEXIST)
			}
			return nil
		}
		parent.entries[base] = newDir(mode)
		parent.mtime = now
		return nil
	case tar.TypeSymlink:
		if path.IsAbs(h.Linkname) || !within(path.Join(parentPath, h.Linkname), dest) {
			return fmt.Errorf("%w: symlink %q -> %q points outside", tarsafe.ErrUnsafe, h.Name, h.Linkname)
		}
		return put(&node{mode: fs.ModeSymlink | 0o777, target: h.Linkname, mtime: now})
	case tar.TypeLink:
		_, target, err := t.walk(dest, h.Linkname, jail)
		switch {
		case err != nil:
			return pathErr("link", h.Linkname, err)
		case target == nil:
			return pathErr("link", h.Linkname, syscall.ENOENT)
		case target.isDir():
			return pathErr("link", h.Linkname, syscall.EPERM)
		}
		return put(target)
	case tar.TypeReg, tar.TypeRegA:
		if existing != nil && !existing.isDir() && !existing.isSymlink() {
			existing.data, existing.mode, existing.mtime = data, mode, now
			return nil
		}
		return put(&node{mode: mode, data: data, mtime: now})
	default:
		return fmt.Errorf("%w: %q has type %q", tarsafe.ErrUnsafe, h.Name, string(h.Typeflag))
	}
}

// entry is a snapshot of one node for CopyOut.
type entry struct {
	name string
	n    node // a copy: data is shared, never modified in place
}

// snapshot returns p (not following a final link) and everything below
// it, named relative to p's parent, parents before children.
func (t *tree) snapshot(p string) ([]entry, error) {
	if !path.IsAbs(p) {
		return nil, pathErr("copyout", p, fs.ErrInvalid)
	}
	if err := t.lock(); err != nil {
		return nil, pathErr("copyout", p, err)
	}
	defer t.mu.Unlock()
	canon, n, err := t.walk("/", p, walkMode{})
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err != nil {
		return nil, pathErr("copyout", p, err)
	}
	name := path.Base(canon)
	if canon == "/" {
		name = "."
	}
	var out []entry
	var add func(name string, n *node)
	add = func(name string, n *node) {
		out = append(out, entry{name: name, n: node{mode: n.mode, data: n.data, target: n.target, mtime: n.mtime}})
		if !n.isDir() {
			return
		}
		names := make([]string, 0, len(n.entries))
		for c := range n.entries {
			names = append(names, c)
		}
		sort.Strings(names)
		for _, c := range names {
			add(path.Join(name, c), n.entries[c])
		}
	}
	add(name, n)
	return out, nil
}

// unixMode converts a FileMode's permission and special bits to the Unix
// representation tar and stat use.
func unixMode(m fs.FileMode) int64 {
	u := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// errNotAbs is returned for sandbox paths that must be absolute.
var errNotAbs = errors.New("path is not absolute")
