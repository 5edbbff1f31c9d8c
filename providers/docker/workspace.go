package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// PrivateDir is the directory of the caller's working directory that never
// reaches a sandbox (it holds .outpost/.env, whose secrets an agent gets
// only by name): it is not copied in, not copied back, and hidden in bind
// mode.
const PrivateDir = ".outpost"

// ConflictSuffix is appended to a file's name when the sandbox's version
// is written beside a host version that changed during the lease.
const ConflictSuffix = ".outpost-conflict"

// manifest is the workspace as last copied between host and sandbox, by
// slash-separated path relative to the workspace.
type manifest struct {
	entries map[string]entry
}

type entry struct {
	typ  byte        // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	mode fs.FileMode // permission bits
	size int64
	sum  [sha256.Size]byte
	link string
}

func (e entry) same(o entry) bool {
	return e.typ == o.typ && e.mode == o.mode && (e.typ != tar.TypeReg || (e.size == o.size && e.sum == o.sum)) && e.link == o.link
}

// writeWorkspace writes the host directory into tw: the directory itself
// as the entry rootName (the engine applies it to the target directory,
// so that /workspace, a volume made root's, becomes the sandbox user's),
// the rest under prefix, owned by the sandbox's user. PrivateDir is
// skipped, and so are special files; symbolic links are copied as links.
// m receives what was written.
func (s *Sandbox) writeWorkspace(ctx context.Context, tw *tar.Writer, rootName, prefix string, m *manifest) error {
	dir, uid, gid := s.hostDir, s.uid, s.gid
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: rootName, Typeflag: tar.TypeDir, Mode: int64(fi.Mode().Perm() | 0o700), Uid: uid, Gid: gid, ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
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
		h := &tar.Header{Name: prefix + rel, Mode: int64(info.Mode().Perm()), Uid: uid, Gid: gid, ModTime: info.ModTime(), Format: tar.FormatPAX}
		e := entry{mode: info.Mode().Perm()}
		switch {
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, link, 0o777
			e.link, e.mode = link, 0
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
			e.size = info.Size()
		default:
			return nil // sockets, fifos, devices
		}
		e.typ = h.Typeflag
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := root.Open(rel)
			if err != nil {
				return err
			}
			hash := sha256.New()
			n, err := io.Copy(tw, io.TeeReader(io.LimitReader(f, h.Size), hash))
			f.Close()
			if err == nil && n != h.Size {
				err = fmt.Errorf("%s changed while being copied", p)
			}
			if err != nil {
				return err
			}
			copy(e.sum[:], hash.Sum(nil))
		}
		m.entries[rel] = e
		return nil
	})
}

// SyncWorkspace copies the sandbox's changes to the workspace back to the
// host directory (copy mode; a no-op in bind mode). Close calls it, after
// stopping the processes that still run; a library user holding a lease
// across turns may call it between turns
// (lease.Sandbox().(*docker.Sandbox).SyncWorkspace(ctx)).
//
// Only what changed in the sandbox since the last copy is written: new and
// modified files, directories and links, with their modes and times.
// Paths the sandbox deleted are deleted on the host when the host's copy
// is still the one copied in. A path changed on both sides keeps the
// host's version; the sandbox's is written beside it with ConflictSuffix
// and the error wraps ErrConflict. Entries that would escape the
// directory (absolute or climbing symbolic links) and anything under
// PrivateDir are not written, and the error wraps tarsafe.ErrUnsafe. The
// rest is written in any case. Writes go through an os.Root of the host
// directory: nothing outside it is touched.
func (s *Sandbox) SyncWorkspace(ctx context.Context) error {
	if s.mode != Copy {
		return nil
	}
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	rc, _, err := s.eng.cli.CopyFromContainer(ctx, s.cid, Workspace)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %s is gone; its workspace changes are lost", ErrVanished, s.id)
		}
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	defer rc.Close()
	root, err := os.OpenRoot(s.hostDir)
	if err != nil {
		return fmt.Errorf("docker: copying the workspace back: %w", err)
	}
	defer root.Close()
	sy := &syncer{root: root, old: s.manifest, now: &manifest{entries: map[string]entry{}}, seen: map[string]bool{}}
	if sy.old == nil {
		sy.old = &manifest{entries: map[string]entry{}}
	}
	if err := sy.apply(ctx, tar.NewReader(rc)); err != nil {
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	sy.deletions()
	s.manifest = sy.now
	var errs []error
	if len(sy.conflicts) > 0 {
		errs = append(errs, fmt.Errorf("%w: kept the host's version of %s; the sandbox's is beside it with suffix %s", ErrConflict, strings.Join(sy.conflicts, ", "), ConflictSuffix))
	}
	if len(sy.refused) > 0 {
		errs = append(errs, fmt.Errorf("docker: not copied back: %w: %s", tarsafe.ErrUnsafe, strings.Join(sy.refused, "; ")))
	}
	errs = append(errs, sy.errs...)
	return errors.Join(errs...)
}

// syncer applies one copy of the workspace to the host.
type syncer struct {
	root      *os.Root
	old, now  *manifest
	seen      map[string]bool
	conflicts []string
	refused   []string
	errs      []error
}

func (sy *syncer) apply(ctx context.Context, tr *tar.Reader) error {
	base := path.Base(Workspace)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name := h.Name
		if err := tarsafe.Check(h); err != nil {
			sy.refused = append(sy.refused, err.Error())
			continue
		}
		rel, ok := strings.CutPrefix(h.Name, base+"/")
		if !ok {
			if h.Name != base {
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
}

func (sy *syncer) entry(tr *tar.Reader, h *tar.Header, rel string) error {
	old, had := sy.old.entries[rel]
	e := entry{typ: h.Typeflag, mode: fs.FileMode(h.Mode).Perm()}
	var data *spool
	switch h.Typeflag {
	case tar.TypeDir:
	case tar.TypeSymlink:
		e.mode, e.link = 0, h.Linkname
	case tar.TypeReg, tar.TypeRegA:
		e.typ = tar.TypeReg
		data = &spool{}
		defer data.Close()
		hash := sha256.New()
		n, err := io.Copy(io.MultiWriter(data, hash), tr)
		if err != nil {
			return err
		}
		e.size = n
		copy(e.sum[:], hash.Sum(nil))
	case tar.TypeLink:
		target, ok := strings.CutPrefix(h.Linkname, path.Base(Workspace)+"/")
		te, known := sy.now.entries[target]
		if !ok || !known || te.typ != tar.TypeReg {
			return fmt.Errorf("hard link to %q is not copied back", h.Linkname)
		}
		f, err := sy.root.Open(target)
		if err != nil {
			return err
		}
		defer f.Close()
		data = &spool{}
		defer data.Close()
		if _, err := io.Copy(data, f); err != nil {
			return err
		}
		e = te
	default:
		return nil
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
		fi, err := sy.root.Lstat(dst)
		if err == nil && !fi.IsDir() {
			if err := sy.root.Remove(dst); err != nil {
				return err
			}
			err = fs.ErrNotExist
		}
		if err != nil {
			if err := sy.root.Mkdir(dst, e.mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return sy.root.Chmod(dst, e.mode)
	case tar.TypeSymlink:
		if err := sy.clear(dst); err != nil {
			return err
		}
		return sy.root.Symlink(e.link, dst)
	}
	// A regular file: write beside, then rename over.
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
	if err = errors.Join(err, f.Chmod(e.mode), f.Close()); err != nil {
		_ = sy.root.Remove(tmp)
		return err
	}
	_ = sy.root.Chtimes(tmp, h.ModTime, h.ModTime)
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
