package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/snapshot"
)

// PrivateDir is the directory of the caller's working directory that never
// reaches a sandbox (it holds .outpost/.env, whose secrets an agent gets
// only by name): it is not copied in, not copied back, and hidden in bind
// mode.
const PrivateDir = ".outpost"

// ConflictSuffix is appended to a file's name when the sandbox's version
// is written beside a host version that changed during the lease.
const ConflictSuffix = ".outpost-conflict"

// Manifest is the workspace as last copied between host and sandbox, by
// slash-separated path relative to the workspace.
type Manifest struct {
	entries map[string]entry
	written bool // made by Write: entries have their times
}

// NewManifest returns an empty manifest.
func NewManifest() *Manifest { return &Manifest{entries: map[string]entry{}} }

// Len is the number of entries.
func (m *Manifest) Len() int {
	if m == nil {
		return 0
	}
	return len(m.entries)
}

type entry struct {
	typ   byte        // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	mode  fs.FileMode // permission bits
	size  int64
	sum   [sha256.Size]byte
	link  string
	mtime int64 // Unix nanoseconds; Write's entries only (Snapshot)
}

// Snapshot is the snapshot (snapshot.Walk) of a directory into
// which the archive Write made m has just been extracted, with modes and
// times kept: its files and links, without walking it again. ok is false
// when only a walk can tell: more than limit files, a directory its owner
// cannot list (the walk skips it), or a manifest not made by Write.
func (m *Manifest) Snapshot(limit int) (s snapshot.Snapshot, ok bool) {
	if m == nil || !m.written {
		return snapshot.Snapshot{}, false
	}
	s = snapshot.Snapshot{Files: map[string]snapshot.FileStat{}, Complete: true}
	for rel, e := range m.entries {
		switch {
		case snapshot.Skip(rel):
		case e.typ == tar.TypeDir:
			if e.mode&0o500 != 0o500 {
				return snapshot.Snapshot{}, false
			}
		case e.typ == tar.TypeReg:
			s.Files[rel] = snapshot.FileStat{Size: e.size, ModTime: e.mtime, Mode: uint32(e.mode)}
		case e.typ == tar.TypeSymlink:
			s.Files[rel] = snapshot.FileStat{Size: int64(len(e.link)), ModTime: e.mtime, Mode: uint32(fs.ModeSymlink | 0o777)}
		}
		if len(s.Files) > limit {
			return snapshot.Snapshot{}, false
		}
	}
	return s, true
}

func (e entry) same(o entry) bool {
	return e.typ == o.typ && e.mode == o.mode && (e.typ != tar.TypeReg || (e.size == o.size && e.sum == o.sum)) && e.link == o.link
}

// Write writes the host directory dir into tw: the directory itself as the
// entry rootName (skipped when rootName is empty), the rest under prefix,
// owned by uid:gid. PrivateDir is skipped, and so are special files;
// symbolic links are copied as links. m receives what was written.
func Write(ctx context.Context, tw *tar.Writer, dir, rootName, prefix string, uid, gid int, m *Manifest) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	m.written = true
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	if rootName != "" {
		if err := tw.WriteHeader(&tar.Header{Name: rootName, Typeflag: tar.TypeDir, Mode: int64(fi.Mode().Perm() | 0o700), Uid: uid, Gid: gid, ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if rel == PrivateDir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walk
			}
			return err
		}
		h, e, err := header(p, prefix+rel, info, uid, gid)
		if err != nil || h == nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if e.sum, err = copyRegular(tw, root, rel, h.Size); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		m.entries[rel] = e
		return nil
	})
}

// header is the tar header and manifest entry of the file at p, or a nil
// header for one that is not copied (sockets, fifos, devices).
func header(p, name string, info fs.FileInfo, uid, gid int) (*tar.Header, entry, error) {
	h := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), Uid: uid, Gid: gid, ModTime: info.ModTime(), Format: tar.FormatPAX}
	e := entry{mode: info.Mode().Perm(), mtime: info.ModTime().UnixNano()}
	switch {
	case info.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
	case info.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(p)
		if err != nil {
			return nil, e, err
		}
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, link, 0o777
		e.link, e.mode = link, 0
	case info.Mode().IsRegular():
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		e.size = info.Size()
	default:
		return nil, e, nil
	}
	e.typ = h.Typeflag
	return h, e, nil
}

// copyRegular copies size bytes of the file rel under root into tw and
// returns their SHA-256; a file that changed size while being copied is an error.
func copyRegular(tw *tar.Writer, root *os.Root, rel string, size int64) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := root.Open(rel)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	hash := sha256.New()
	n, err := io.Copy(tw, io.TeeReader(io.LimitReader(f, size), hash))
	if err == nil && n != size {
		err = errors.New("changed while being copied")
	}
	copy(sum[:], hash.Sum(nil))
	return sum, err
}

// Result is what Sync did.
type Result struct {
	// Manifest is the workspace as now copied: the next Sync's old one.
	Manifest *Manifest
	// Conflicts are the paths changed on both sides: the host's version
	// was kept, the sandbox's written beside it with ConflictSuffix.
	Conflicts []string
	// Refused describes the entries not written because they would
	// escape the directory or write PrivateDir.
	Refused []string
	// Errs are the failures writing single paths; the rest was written.
	Errs []error
}

// Sync applies a tar stream of the sandbox's workspace to the host
// directory hostDir: the stream's entries are named base/... (as `tar -C
// parent -c base` or the Docker Engine's archive endpoint name them), and
// old is the manifest of the last copy (nil: nothing was copied).
//
// Only what changed in the sandbox since the last copy is written: new and
// modified files, directories and links, with their modes and times.
// Paths the sandbox deleted are deleted on the host when the host's copy
// is still the one copied in. A path changed on both sides keeps the
// host's version; the sandbox's is written beside it with ConflictSuffix
// (Result.Conflicts). Entries that would escape the directory (absolute or
// climbing symbolic links) and anything under PrivateDir are not written
// (Result.Refused). The error is the stream's (or ctx's): the rest of
// what went wrong is in the Result.
func Sync(ctx context.Context, hostDir, base string, old *Manifest, tr *tar.Reader) (*Result, error) {
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sy := &syncer{root: root, base: base, old: old, now: NewManifest(), seen: map[string]bool{}}
	if sy.old == nil {
		sy.old = NewManifest()
	}
	if err := sy.apply(ctx, tr); err != nil {
		return nil, err
	}
	sy.deletions()
	return &Result{Manifest: sy.now, Conflicts: sy.conflicts, Refused: sy.refused, Errs: sy.errs}, nil
}

// Err summarizes the result's conflicts, refusals and errors as one error
// (nil when there are none); conflict wraps the conflicts.
func (r *Result) Err(conflict error) error {
	var errs []error
	if len(r.Conflicts) > 0 {
		errs = append(errs, fmt.Errorf("%w: kept the host's version of %s; the sandbox's is beside it with suffix %s", conflict, strings.Join(r.Conflicts, ", "), ConflictSuffix))
	}
	if len(r.Refused) > 0 {
		errs = append(errs, fmt.Errorf("not copied back: %w: %s", tarsafe.ErrUnsafe, strings.Join(r.Refused, "; ")))
	}
	errs = append(errs, r.Errs...)
	return errors.Join(errs...)
}

// syncer applies one copy of the workspace to the host.
type syncer struct {
	root      *os.Root
	base      string
	old, now  *Manifest
	seen      map[string]bool
	conflicts []string
	refused   []string
	errs      []error
}

func (sy *syncer) apply(ctx context.Context, tr *tar.Reader) error {
	for h, err := range tarsafe.Entries(ctx, tr) {
		if err != nil {
			return err
		}
		name := h.Name
		if err := tarsafe.Check(h); err != nil {
			sy.refused = append(sy.refused, err.Error())
			continue
		}
		rel, ok := strings.CutPrefix(h.Name, sy.base+"/")
		if !ok {
			if h.Name != sy.base {
				sy.refused = append(sy.refused, fmt.Sprintf("%q is outside the workspace", name))
			}
			continue
		}
		if rel == PrivateDir || strings.HasPrefix(rel, PrivateDir+"/") {
			sy.refused = append(sy.refused, fmt.Sprintf("%s: the sandbox may not write %s/", rel, PrivateDir))
			continue
		}
		sy.seen[rel] = true
		if err := sy.entry(tr, h, rel); err != nil {
			sy.errs = append(sy.errs, fmt.Errorf("%s: %w", rel, err))
		}
	}
	return nil
}

func (sy *syncer) entry(tr *tar.Reader, h *tar.Header, rel string) error {
	old, had := sy.old.entries[rel]
	e, data, err := sy.read(tr, h)
	if data != nil {
		defer data.Close()
	}
	if err != nil || e.typ == 0 {
		return err
	}
	sy.now.entries[rel] = e
	if had && old.same(e) {
		return nil // unchanged in the sandbox
	}
	dst := rel
	if !sy.hostMatches(rel, old, had) {
		if e.typ == tar.TypeDir {
			if fi, err := sy.root.Lstat(rel); err == nil && fi.IsDir() {
				return nil // both sides have a directory: merge into it
			}
		}
		sy.conflicts = append(sy.conflicts, rel)
		dst = rel + ConflictSuffix
	}
	switch e.typ {
	case tar.TypeDir:
		return sy.writeDir(dst, e.mode)
	case tar.TypeSymlink:
		if err := sy.clear(dst); err != nil {
			return err
		}
		return sy.root.Symlink(e.link, dst)
	}
	return sy.writeFile(dst, data, e.mode, h.ModTime)
}

// read is the manifest entry of h and, for a regular file or a hard link
// to one, its content spooled; an entry of type 0 for what is not copied.
func (sy *syncer) read(tr *tar.Reader, h *tar.Header) (entry, *Spool, error) {
	e := entry{typ: h.Typeflag, mode: fs.FileMode(h.Mode).Perm()}
	switch h.Typeflag {
	case tar.TypeDir:
	case tar.TypeSymlink:
		e.mode, e.link = 0, h.Linkname
	case tar.TypeReg, tar.TypeRegA:
		e.typ = tar.TypeReg
		data := &Spool{}
		hash := sha256.New()
		n, err := io.Copy(io.MultiWriter(data, hash), tr)
		e.size = n
		copy(e.sum[:], hash.Sum(nil))
		return e, data, err
	case tar.TypeLink:
		target, ok := strings.CutPrefix(h.Linkname, sy.base+"/")
		te, known := sy.now.entries[target]
		if !ok || !known || te.typ != tar.TypeReg {
			return e, nil, fmt.Errorf("hard link to %q is not copied back", h.Linkname)
		}
		f, err := sy.root.Open(target)
		if err != nil {
			return e, nil, err
		}
		defer f.Close()
		data := &Spool{}
		_, err = io.Copy(data, f)
		return te, data, err
	default:
		return entry{}, nil, nil
	}
	return e, nil, nil
}

// writeDir makes dst a directory of mode perm, replacing what else is there.
func (sy *syncer) writeDir(dst string, perm fs.FileMode) error {
	fi, err := sy.root.Lstat(dst)
	if err == nil && !fi.IsDir() {
		if err := sy.root.Remove(dst); err != nil {
			return err
		}
		err = fs.ErrNotExist
	}
	if err != nil {
		if err := sy.root.Mkdir(dst, perm|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return sy.root.Chmod(dst, perm)
}

// writeFile writes a regular file beside dst, then renames it over.
func (sy *syncer) writeFile(dst string, data *Spool, perm fs.FileMode, mtime time.Time) error {
	body, err := data.Reader()
	if err != nil {
		return err
	}
	tmp := path.Join(path.Dir(dst), ".outpost-sync-"+randomHex(6))
	f, err := sy.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, body)
	if err = errors.Join(err, f.Chmod(perm), f.Close()); err != nil {
		_ = sy.root.Remove(tmp)
		return err
	}
	_ = sy.root.Chtimes(tmp, mtime, mtime)
	if err := sy.clearDir(dst); err != nil {
		_ = sy.root.Remove(tmp)
		return err
	}
	if err := sy.root.Rename(tmp, dst); err != nil {
		_ = sy.root.Remove(tmp)
		return err
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// clear removes whatever is at p (a directory with its contents).
func (sy *syncer) clear(p string) error {
	err := sy.root.RemoveAll(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// clearDir removes a directory at p so a file can take its place.
func (sy *syncer) clearDir(p string) error {
	if fi, err := sy.root.Lstat(p); err == nil && fi.IsDir() {
		return sy.root.RemoveAll(p)
	}
	return nil
}

// hostMatches reports whether the host's rel is as last copied (absent
// when it was not in the manifest).
func (sy *syncer) hostMatches(rel string, old entry, had bool) bool {
	fi, err := sy.root.Lstat(rel)
	if !had {
		return errors.Is(err, fs.ErrNotExist)
	}
	if err != nil {
		return false
	}
	switch old.typ {
	case tar.TypeDir:
		return fi.IsDir()
	case tar.TypeSymlink:
		if fi.Mode()&fs.ModeSymlink == 0 {
			return false
		}
		link, err := sy.root.Readlink(rel)
		return err == nil && link == old.link
	case tar.TypeReg:
		if !fi.Mode().IsRegular() || fi.Size() != old.size || fi.Mode().Perm() != old.mode {
			return false
		}
		f, err := sy.root.Open(rel)
		if err != nil {
			return false
		}
		defer f.Close()
		hash := sha256.New()
		if _, err := io.Copy(hash, f); err != nil {
			return false
		}
		return bytes.Equal(hash.Sum(nil), old.sum[:])
	}
	return false
}

// deletions removes from the host what the sandbox deleted, where the
// host's copy is unchanged; children before parents.
func (sy *syncer) deletions() {
	var gone []string
	for rel := range sy.old.entries {
		if !sy.seen[rel] {
			gone = append(gone, rel)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(gone)))
	for _, rel := range gone {
		old := sy.old.entries[rel]
		if !sy.hostMatches(rel, old, true) {
			continue // changed on the host: keep it
		}
		err := sy.root.Remove(rel)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && old.typ != tar.TypeDir {
			sy.errs = append(sy.errs, fmt.Errorf("%s: %w", rel, err))
		}
	}
}

// SpoolMemory is how much a Spool holds in memory before spilling to a
// temporary file.
const SpoolMemory = 8 << 20

// Spool holds a stream in memory, then in an unlinked temporary file past
// SpoolMemory bytes. The zero value is ready to use.
type Spool struct {
	mem  bytes.Buffer
	file *os.File
	err  error
}

func (s *Spool) Write(b []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.file == nil && s.mem.Len()+len(b) <= SpoolMemory {
		return s.mem.Write(b)
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "outpost-copy-*.tar")
		if err != nil {
			s.err = err
			return 0, err
		}
		_ = os.Remove(f.Name()) // unlinked: gone with the descriptor
		s.file = f
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			s.err = err
			return 0, err
		}
		s.mem = bytes.Buffer{}
	}
	n, err := s.file.Write(b)
	if err != nil {
		s.err = err
	}
	return n, err
}

// Reader returns the spooled stream from its start.
func (s *Spool) Reader() (io.Reader, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.file == nil {
		return bytes.NewReader(s.mem.Bytes()), nil
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.file, nil
}

// Close releases the temporary file, if any.
func (s *Spool) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

// CheckEntry refuses an entry of an archive about to be extracted by a
// tool that follows symbolic links: what tarsafe.Check refuses, and an
// entry (or a hard link's target) that passes through a symbolic link an
// earlier entry of the same archive made (links: entry name -> is a
// symbolic link, kept by the caller as it goes).
func CheckEntry(h *tar.Header, links map[string]bool) error {
	if err := tarsafe.Check(h); err != nil {
		return err
	}
	if l := ThroughLink(h.Name, links); l != "" {
		return fmt.Errorf("%w: %q passes through the symbolic link %q made by the same archive", tarsafe.ErrUnsafe, h.Name, l)
	}
	if h.Typeflag == tar.TypeLink {
		if l := ThroughLink(h.Linkname, links); l != "" {
			return fmt.Errorf("%w: hard link %q -> %q passes through the symbolic link %q", tarsafe.ErrUnsafe, h.Name, h.Linkname, l)
		}
	}
	return nil
}

// ThroughLink returns the first proper prefix of name that is a symbolic
// link in links (entry name -> is a symbolic link), or "": an extractor
// that follows links would write an entry under such a prefix wherever
// the link points, however harmless each link looks alone.
func ThroughLink(name string, links map[string]bool) string {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' && links[name[:i]] {
			return name[:i]
		}
	}
	return ""
}
