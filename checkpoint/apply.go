package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Conflict is one file Apply could not merge.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ConflictError is Apply's error when a file does not merge; it wraps
// ErrConflict. Nothing was written.
type ConflictError struct{ Conflicts []Conflict }

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint: %d file(s) do not merge:", len(e.Conflicts))
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, " %s (%s);", c.Path, c.Reason)
	}
	return strings.TrimSuffix(b.String(), ";")
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Applied is what Apply did, file by file.
type Applied struct {
	// Written were taken from the turn as they are; Merged were merged
	// with changes of the working tree; Deleted were removed; Unchanged
	// already held the turn's version.
	Written   []string `json:"written"`
	Merged    []string `json:"merged"`
	Deleted   []string `json:"deleted"`
	Unchanged []string `json:"unchanged"`
}

// side is one version of a file: absent, or content with a mode.
type side struct {
	present bool
	mode    filemode.FileMode
	data    []byte
}

func (a side) equal(b side) bool {
	return a.present == b.present && (!a.present || (a.mode == b.mode && bytes.Equal(a.data, b.data)))
}

// plannedWrite is one change Apply will make.
type plannedWrite struct {
	path string
	to   side
	kind string // written, merged, deleted
}

// Apply merges the change from tree base to tree theirs into the working
// tree dir, three-way: a file the working tree left as in base takes the
// turn's version; one the working tree changed too is merged line by
// line (Merge3); what does not merge is a conflict. All or nothing: with
// any conflict, Apply returns a *ConflictError listing every one and
// writes nothing; a write that fails puts back what was written before
// it. Writes go through an os.Root of dir and never follow a link out of
// it (ErrUnsafe).
func Apply(ctx context.Context, objs Objects, base, theirs plumbing.Hash, dir string) (*Applied, error) {
	chs, _, err := Diff(ctx, objs, base, theirs)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: apply: %w", err)
	}
	defer root.Close()
	bs, err := sides(ctx, objs, base)
	if err != nil {
		return nil, err
	}
	ts, err := sides(ctx, objs, theirs)
	if err != nil {
		return nil, err
	}
	done := &Applied{}
	var plan []plannedWrite
	var conflicts []Conflict
	for _, c := range chs {
		b, t := bs[c.Path], ts[c.Path]
		o, err := readOurs(root, c.Path)
		if err != nil {
			conflicts = append(conflicts, Conflict{c.Path, err.Error()})
			continue
		}
		bside, err := b.side(ctx, objs)
		if err != nil {
			return nil, err
		}
		tside, err := t.side(ctx, objs)
		if err != nil {
			return nil, err
		}
		w, reason := merge(c.Path, bside, o, tside)
		switch {
		case reason != "":
			conflicts = append(conflicts, Conflict{c.Path, reason})
		case w == nil:
			done.Unchanged = append(done.Unchanged, c.Path)
		default:
			plan = append(plan, *w)
		}
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{Conflicts: conflicts}
	}
	if err := write(root, plan); err != nil {
		return nil, err
	}
	for _, w := range plan {
		switch w.kind {
		case "merged":
			done.Merged = append(done.Merged, w.path)
		case "deleted":
			done.Deleted = append(done.Deleted, w.path)
		default:
			done.Written = append(done.Written, w.path)
		}
	}
	return done, nil
}

// lazySide is a tree's file, read when needed.
type lazySide struct {
	f  File
	ok bool
}

func (l lazySide) side(ctx context.Context, objs Objects) (side, error) {
	if !l.ok {
		return side{}, nil
	}
	data, err := ReadBlob(ctx, objs, l.f.Hash)
	if err != nil {
		return side{}, fmt.Errorf("checkpoint: %s: %w", l.f.Path, err)
	}
	return side{present: true, mode: l.f.Mode, data: data}, nil
}

func sides(ctx context.Context, objs Objects, tree plumbing.Hash) (map[string]lazySide, error) {
	out := map[string]lazySide{}
	if tree.IsZero() {
		return out, nil
	}
	files, err := List(ctx, objs, tree)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		out[f.Path] = lazySide{f: f, ok: true}
	}
	return out, nil
}

// readOurs reads the working tree's version of a file, refusing a path
// that passes through a link.
func readOurs(root *os.Root, p string) (side, error) {
	name := filepath.FromSlash(p)
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return side{}, nil
	}
	if err != nil {
		return side{}, fmt.Errorf("unreadable or outside the tree: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := root.Readlink(name)
		if err != nil {
			return side{}, err
		}
		return side{present: true, mode: filemode.Symlink, data: []byte(t)}, nil
	case fi.Mode().IsRegular():
		data, err := root.ReadFile(name)
		if err != nil {
			return side{}, err
		}
		mode := filemode.Regular
		if fi.Mode()&0o100 != 0 {
			mode = filemode.Executable
		}
		return side{present: true, mode: mode, data: data}, nil
	default:
		return side{}, fmt.Errorf("not a file in the working tree (%s)", fi.Mode().Type())
	}
}

// merge decides one file: nil and no reason when the working tree holds
// the turn's version already.
func merge(p string, b, o, t side) (*plannedWrite, string) {
	switch {
	case o.equal(t):
		return nil, ""
	case o.equal(b):
		if !t.present {
			return &plannedWrite{path: p, kind: "deleted"}, ""
		}
		return &plannedWrite{path: p, to: t, kind: "written"}, ""
	case !o.present:
		return nil, "deleted in the working tree, changed by the turn"
	case !t.present:
		return nil, "changed in the working tree, deleted by the turn"
	case o.mode == filemode.Symlink || t.mode == filemode.Symlink || b.mode == filemode.Symlink:
		return nil, "a link changed on both sides"
	}
	mode := t.mode
	if b.present && t.mode == b.mode {
		mode = o.mode
	}
	merged, n := Merge3(b.data, o.data, t.data)
	if n > 0 {
		if merged == nil {
			return nil, "binary file changed on both sides"
		}
		return nil, fmt.Sprintf("%d conflicting region(s)", n)
	}
	return &plannedWrite{path: p, to: side{present: true, mode: mode, data: merged}, kind: "merged"}, ""
}

// write makes the planned changes, putting back what it had written when
// one fails.
func write(root *os.Root, plan []plannedWrite) error {
	sort.Slice(plan, func(i, j int) bool { return plan[i].path < plan[j].path })
	var undo []func()
	for _, w := range plan {
		old, err := readOurs(root, w.path)
		if err != nil {
			return rollback(undo, w.path, err)
		}
		if err := put(root, w.path, w.to); err != nil {
			return rollback(undo, w.path, err)
		}
		p := w.path
		undo = append(undo, func() { _ = put(root, p, old) })
	}
	return nil
}

func rollback(undo []func(), p string, err error) error {
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
	if errors.Is(err, ErrUnsafe) {
		return err
	}
	return fmt.Errorf("%w: apply %s: %w (nothing was applied)", ErrUnsafe, p, err)
}

// put makes a file as s says (absent: removed), through a temporary file
// renamed into place.
func put(root *os.Root, p string, s side) error {
	name := filepath.FromSlash(p)
	if !s.present {
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if d := path.Dir(p); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return err
		}
	}
	tmp := name + ".outpost-apply"
	_ = root.Remove(tmp)
	if s.mode == filemode.Symlink {
		if err := root.Symlink(string(s.data), tmp); err != nil {
			return err
		}
	} else {
		perm := os.FileMode(0o644)
		if s.mode == filemode.Executable {
			perm = 0o755
		}
		if err := root.WriteFile(tmp, s.data, perm); err != nil {
			return err
		}
		_ = root.Chmod(tmp, perm)
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}
