package conversation

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// Ancestor limits of Capture.
const (
	// MaxAncestorDepth is the longest parent chain Capture follows.
	MaxAncestorDepth = 64
	// MaxAncestors is the most native ids Capture collects files for,
	// including the conversation's own.
	MaxAncestors = 256
)

// Capture collects the native conversation files of native from the
// sandbox home c.Home(), as Storage st describes them:
//
//   - For each root in st.Roots, it copies home/root out (c.CopyOut). A
//     missing root is skipped.
//   - It keeps the regular files under the root whose root-relative path
//     rel satisfies st.Match(rel, native). rel is slash-separated, clean,
//     never empty, and relative to the longest root containing the file
//     (when roots nest, a file belongs to the innermost one). Directories,
//     symbolic links (never followed), hard links and special files are
//     skipped.
//   - It then calls st.Ancestors(rel, content) on each kept file and
//     captures the files of the native ids returned too, recursively, at
//     most MaxAncestorDepth levels deep and MaxAncestors ids in all (ids
//     already seen are not captured twice, so cycles end). Ancestors with
//     no files in the home are skipped: the CLI, not outpost, decides
//     whether it can resume without them.
//
// The files are returned sorted by Path, which is home-relative: root +
// "/" + rel. Capture reads at most MaxFiles files and MaxSize bytes.
//
// Errors: ErrNotFound when native has no files; ErrInvalid when st is
// incomplete (nil, no roots or no Match), native is empty, the limits are
// exceeded or the ancestor chain is too long; ErrUnsafe for a bad storage
// root or an unsafe entry in a copied stream; others from c (a copy that
// fails) and from ctx. A panic in a Storage hook is returned as an error.
func Capture(ctx context.Context, c Copier, st *harness.Storage, native string) ([]File, error) {
	if c == nil {
		return nil, fmt.Errorf("conversation: capture: %w: no sandbox", ErrInvalid)
	}
	roots, err := storageRoots(st, true)
	if err != nil {
		return nil, fmt.Errorf("conversation: capture: %w", err)
	}
	if native == "" {
		return nil, fmt.Errorf("conversation: capture: %w: empty native id", ErrInvalid)
	}
	home := c.Home()
	if !path.IsAbs(home) {
		return nil, fmt.Errorf("conversation: capture: %w: sandbox home %q is not absolute", ErrInvalid, home)
	}
	cp := &capturer{ctx: ctx, c: c, st: st, home: path.Clean(home), roots: roots, files: map[string]File{}}
	seen := map[string]bool{native: true}
	level := []string{native}
	for depth := 0; len(level) > 0; depth++ {
		if depth > MaxAncestorDepth {
			return nil, fmt.Errorf("conversation: capture %s: %w: ancestor chain deeper than %d", native, ErrInvalid, MaxAncestorDepth)
		}
		found, err := cp.scan(level)
		if err != nil {
			return nil, fmt.Errorf("conversation: capture %s: %w", native, err)
		}
		if depth == 0 && len(found) == 0 {
			return nil, fmt.Errorf("conversation: capture: %w: no files for native id %q under %s", ErrNotFound, native, strings.Join(roots, ", "))
		}
		if st.Ancestors == nil {
			break
		}
		var nextLevel []string
		for _, f := range found {
			ids, err := ancestors(st, f.rel, f.Data)
			if err != nil {
				return nil, fmt.Errorf("conversation: capture %s: %w", native, err)
			}
			for _, id := range ids {
				if id == "" || seen[id] {
					continue
				}
				if len(seen) >= MaxAncestors {
					return nil, fmt.Errorf("conversation: capture %s: %w: more than %d ancestors", native, ErrInvalid, MaxAncestors-1)
				}
				seen[id] = true
				nextLevel = append(nextLevel, id)
			}
		}
		level = nextLevel
	}
	out := make([]File, 0, len(cp.files))
	for _, f := range cp.files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

type capturer struct {
	ctx   context.Context
	c     Copier
	st    *harness.Storage
	home  string
	roots []string
	files map[string]File // captured so far, by home-relative path
	size  int64
}

type capturedFile struct {
	File
	rel string
}

// scan copies every root out once and captures the files matching any of
// natives that were not captured before, returned sorted by path.
func (cp *capturer) scan(natives []string) ([]capturedFile, error) {
	var out []capturedFile
	for _, root := range cp.roots {
		got, err := cp.scanRoot(root, natives)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.SortFunc(out, func(a, b capturedFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (cp *capturer) scanRoot(root string, natives []string) ([]capturedFile, error) {
	if err := cp.ctx.Err(); err != nil {
		return nil, err
	}
	if l, ok := cp.c.(Lister); ok {
		rels, err := l.List(cp.ctx, path.Join(cp.home, root))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil
		case err == nil:
			return cp.scanListed(root, rels, natives)
		case !errors.Is(err, errors.ErrUnsupported):
			return nil, fmt.Errorf("listing %s: %w", root, err)
		}
	}
	return cp.scanCopy(root, natives, path.Join(cp.home, root), "")
}

// wanted names the file rel under root (p, its path under the home) and
// reports whether it is still to be captured: not captured yet, under no
// inner root, and matching.
func (cp *capturer) wanted(root, rel string, natives []string) (p string, ok bool, err error) {
	p = root + "/" + rel
	if _, done := cp.files[p]; done || innerRoot(p, cp.roots) != root {
		return p, false, nil
	}
	ok, err = matchAny(cp.st, rel, natives)
	return p, ok, err
}

// scanListed copies out, one by one, only the listed files that match.
func (cp *capturer) scanListed(root string, rels, natives []string) ([]capturedFile, error) {
	var out []capturedFile
	for _, rel := range rels {
		if err := cp.ctx.Err(); err != nil {
			return nil, err
		}
		if !validPath(rel) {
			return nil, fmt.Errorf("%w: the listing of %s holds %q", ErrUnsafe, root, rel)
		}
		p, match, err := cp.wanted(root, rel, natives)
		if err != nil {
			return nil, err
		}
		if !match {
			continue
		}
		got, err := cp.scanCopy(root, natives, path.Join(cp.home, p), rel)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// scanCopy reads the tar copy of src (a root, or with only set, the one
// file rel under it) and captures the files matching natives.
func (cp *capturer) scanCopy(root string, natives []string, src, only string) ([]capturedFile, error) {
	rc, err := cp.c.CopyOut(cp.ctx, src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("copying %s out: %w", root, err)
	}
	defer rc.Close()
	base := path.Base(root)
	if only != "" {
		base = path.Base(src)
	}
	tr := tar.NewReader(rc)
	var out []capturedFile
	for {
		if err := cp.ctx.Err(); err != nil {
			return nil, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if errors.Is(err, tarsafe.ErrUnsafe) {
			return nil, fmt.Errorf("%w: reading the copy of %s: %w", ErrUnsafe, root, err)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the copy of %s: %w", root, err)
		}
		if !regular(h) {
			continue // directories, links (never followed), devices...
		}
		if err := tarsafe.Check(h); err != nil {
			return nil, fmt.Errorf("%w: in the copy of %s: %w", ErrUnsafe, root, err)
		}
		var rel string
		if only != "" {
			if h.Name != base {
				return nil, fmt.Errorf("%w: the copy of %s/%s holds %q", ErrInvalid, root, only, h.Name)
			}
			rel = only
		} else {
			if h.Name == base {
				continue // a root that is a file
			}
			var ok bool
			if rel, ok = under(h.Name, base); !ok {
				return nil, fmt.Errorf("%w: the copy of %s holds %q, outside %s/", ErrInvalid, root, h.Name, base)
			}
		}
		p, match, err := cp.wanted(root, rel, natives)
		if err != nil {
			return nil, err
		}
		if !match {
			continue
		}
		if !validPath(p) {
			return nil, fmt.Errorf("%w: captured path %q", ErrUnsafe, p)
		}
		if len(cp.files) >= MaxFiles {
			return nil, fmt.Errorf("%w: more than %d files", ErrInvalid, MaxFiles)
		}
		if h.Size < 0 || h.Size > MaxSize-cp.size {
			return nil, fmt.Errorf("%w: files larger than %d bytes", ErrInvalid, MaxSize)
		}
		data, err := readN(tr, h.Size)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		cp.size += h.Size
		f := File{Path: p, Mode: uint32(h.Mode) & 0o777, Data: data}
		cp.files[p] = f
		out = append(out, capturedFile{File: f, rel: rel})
	}
}

// innerRoot returns the longest root containing the home-relative path p,
// or "".
func innerRoot(p string, roots []string) string {
	best := ""
	for _, r := range roots {
		if _, ok := under(p, r); ok && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// storageRoots checks st and returns its roots.
func storageRoots(st *harness.Storage, needMatch bool) ([]string, error) {
	if st == nil || len(st.Roots) == 0 || (needMatch && st.Match == nil) {
		return nil, fmt.Errorf("%w: storage needs Roots and Match", ErrInvalid)
	}
	for _, r := range st.Roots {
		if !validPath(r) {
			return nil, fmt.Errorf("%w: storage root %q (want a clean relative path inside the home)", ErrUnsafe, r)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(st.Roots))), nil
}

// The Storage hooks are preset code fed with paths and contents the agent
// controls: a panic becomes an error.

func matchAny(st *harness.Storage, rel string, natives []string) (ok bool, err error) {
	defer recoverHook("Match", &err)
	for _, n := range natives {
		if st.Match(rel, n) {
			return true, nil
		}
	}
	return false, nil
}

func ancestors(st *harness.Storage, rel string, data []byte) (ids []string, err error) {
	defer recoverHook("Ancestors", &err)
	return st.Ancestors(rel, data), nil
}

func place(st *harness.Storage, rel, native, workdir string) (p string, err error) {
	defer recoverHook("Place", &err)
	return st.Place(rel, native, workdir), nil
}

func recoverHook(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("conversation: storage %s hook panicked: %v", name, r)
	}
}

// Restore writes a conversation's files into the sandbox home c.Home() so
// the CLI finds native when run in workdir. Every file is checked first:
// its Path must be clean, relative, inside one of st.Roots, and its Mode
// permission bits only (no links). When st.Place is set, each file moves
// to root + "/" + st.Place(rel, native, workdir), rel being the path
// relative to the innermost root containing it (as in Capture); the new
// path is checked the same way. The files are then copied in with one
// c.CopyIn of a tar stream (tarsafe.Write) into the home; existing files
// are replaced, missing directories created.
//
// Errors: ErrUnsafe for any unsafe path or mode, ErrInvalid for no files,
// duplicate destinations or a bad st, and in both cases nothing is
// written; otherwise errors of c.CopyIn and ctx, after which the home may
// hold some of the files.
func Restore(ctx context.Context, c Copier, st *harness.Storage, native, workdir string, files []File) error {
	if c == nil {
		return fmt.Errorf("conversation: restore: %w: no sandbox", ErrInvalid)
	}
	roots, err := storageRoots(st, false)
	if err != nil {
		return fmt.Errorf("conversation: restore: %w", err)
	}
	home := c.Home()
	if !path.IsAbs(home) {
		return fmt.Errorf("conversation: restore: %w: sandbox home %q is not absolute", ErrInvalid, home)
	}
	if len(files) == 0 {
		return fmt.Errorf("conversation: restore %s: %w: no files", native, ErrInvalid)
	}
	if len(files) > MaxFiles {
		return fmt.Errorf("conversation: restore %s: %w: more than %d files", native, ErrInvalid, MaxFiles)
	}
	entries := make([]tarsafe.File, 0, len(files))
	dsts := make([]string, 0, len(files))
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("conversation: restore %s: %w", native, err)
		}
		if err := checkMode(f.Path, f.Mode); err != nil {
			return fmt.Errorf("conversation: restore %s: %w", native, err)
		}
		root := innerRoot(f.Path, roots)
		if root == "" {
			return fmt.Errorf("conversation: restore %s: %w: %q is not under a storage root (%s)", native, ErrUnsafe, f.Path, strings.Join(roots, ", "))
		}
		dst := f.Path
		if st.Place != nil {
			rel, _ := under(f.Path, root)
			nrel, err := place(st, rel, native, workdir)
			if err != nil {
				return fmt.Errorf("conversation: restore %s: %w", native, err)
			}
			if !validPath(nrel) {
				return fmt.Errorf("conversation: restore %s: %w: %q placed at %q", native, ErrUnsafe, f.Path, nrel)
			}
			dst = root + "/" + nrel
			if !validPath(dst) {
				return fmt.Errorf("conversation: restore %s: %w: %q placed at %q", native, ErrUnsafe, f.Path, dst)
			}
		}
		mode := fs.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o600
		}
		entries = append(entries, tarsafe.File{Name: dst, Mode: mode, Data: f.Data})
		dsts = append(dsts, dst)
	}
	if err := checkTree(dsts); err != nil {
		return fmt.Errorf("conversation: restore %s: %w", native, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: restore %s: %w", native, err)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(tarsafe.Write(pw, entries))
	}()
	err = c.CopyIn(ctx, path.Clean(home), pr)
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the writer if CopyIn stopped early
	<-done
	if err != nil {
		return fmt.Errorf("conversation: restore %s: %w", native, err)
	}
	return nil
}

// TranscriptOf returns the captured files of native as the Transcript a
// preset's TranscriptUsage reads. The map shares the files' Data.
func TranscriptOf(native string, files []File) harness.Transcript {
	t := harness.Transcript{Native: native, Files: make(map[string][]byte, len(files))}
	for _, f := range files {
		t.Files[f.Path] = f.Data
	}
	return t
}
