package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/utils/merkletrie"
)

// Change is one file that differs between two trees.
type Change struct {
	Path string `json:"path"`
	// Action is "added", "modified" or "deleted".
	Action string `json:"action"`
	// Added and Deleted count lines (0 for a binary file).
	Added   int  `json:"added"`
	Deleted int  `json:"deleted"`
	Binary  bool `json:"binary,omitempty"`
}

// Diff compares two trees (either may be plumbing.ZeroHash: the empty
// tree) and returns the file changes with their line counts, and the
// patch to print (Patch.Encode writes a unified diff as git does).
func Diff(ctx context.Context, objs Objects, from, to plumbing.Hash) ([]Change, *object.Patch, error) {
	s := &gitStorer{ctx: ctx, objs: objs}
	a, err := s.tree(from)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.tree(to)
	if err != nil {
		return nil, nil, err
	}
	chs, err := object.DiffTreeContext(ctx, a, b)
	if err != nil {
		return nil, nil, s.cause(err)
	}
	p, err := chs.PatchContext(ctx)
	if err != nil {
		return nil, nil, s.cause(err)
	}
	stats := map[string]object.FileStat{}
	for _, st := range p.Stats() {
		stats[st.Name] = st
	}
	binary := map[string]bool{}
	for _, fp := range p.FilePatches() {
		f, t := fp.Files()
		if fp.IsBinary() {
			if t != nil {
				binary[t.Path()] = true
			} else if f != nil {
				binary[f.Path()] = true
			}
		}
	}
	out := make([]Change, 0, len(chs))
	for _, c := range chs {
		act, err := c.Action()
		if err != nil {
			return nil, nil, err
		}
		ch := Change{Path: c.To.Name}
		switch act {
		case merkletrie.Insert:
			ch.Action = "added"
		case merkletrie.Delete:
			ch.Action, ch.Path = "deleted", c.From.Name
		default:
			ch.Action = "modified"
		}
		st := stats[ch.Path]
		ch.Added, ch.Deleted, ch.Binary = st.Addition, st.Deletion, binary[ch.Path]
		out = append(out, ch)
	}
	return out, p, nil
}

// WritePatch writes the unified diff of two trees to w.
func WritePatch(ctx context.Context, objs Objects, from, to plumbing.Hash, w io.Writer) error {
	_, p, err := Diff(ctx, objs, from, to)
	if err != nil {
		return err
	}
	return p.Encode(w)
}

// gitStorer lets go-git's object layer (trees, diffs, patches) read an
// Objects store. It is read-only but for SetEncodedObject.
type gitStorer struct {
	ctx  context.Context
	objs Objects
	err  error // the first error of ours, kept: go-git may wrap it away
}

var _ storer.EncodedObjectStorer = (*gitStorer)(nil)

func (s *gitStorer) tree(h plumbing.Hash) (*object.Tree, error) {
	if h.IsZero() {
		return &object.Tree{}, nil
	}
	t, err := object.GetTree(s, h)
	if err != nil {
		return nil, s.cause(err)
	}
	return t, nil
}

// cause returns the store's own error where go-git reports a failure
// that came from it.
func (s *gitStorer) cause(err error) error {
	if s.err != nil {
		return s.err
	}
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (s *gitStorer) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (s *gitStorer) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	r, err := o.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	obj := NewObject(o.Type(), data)
	return obj.Hash, s.objs.Write(s.ctx, []Object{obj})
}

func (s *gitStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.objs.Read(s.ctx, h)
	if errors.Is(err, ErrNotFound) {
		if s.err == nil {
			s.err = err
		}
		return nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return nil, err
	}
	if t != plumbing.AnyObject && o.Type != t {
		return nil, plumbing.ErrObjectNotFound
	}
	return memObject(o), nil
}

func (s *gitStorer) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.ErrUnsupported
}

func (s *gitStorer) HasEncodedObject(h plumbing.Hash) error {
	miss, err := s.objs.Missing(s.ctx, []plumbing.Hash{h})
	if err != nil {
		return err
	}
	if len(miss) > 0 {
		return plumbing.ErrObjectNotFound
	}
	return nil
}

func (s *gitStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	o, err := s.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return 0, err
	}
	return o.Size(), nil
}

func (s *gitStorer) AddAlternate(string) error { return errors.ErrUnsupported }

// Changed counts the files that differ between two trees, reading only
// the trees that differ.
func Changed(ctx context.Context, objs Objects, from, to plumbing.Hash) (int, error) {
	if from == to {
		return 0, nil
	}
	s := &gitStorer{ctx: ctx, objs: objs}
	a, err := s.tree(from)
	if err != nil {
		return 0, err
	}
	b, err := s.tree(to)
	if err != nil {
		return 0, err
	}
	chs, err := object.DiffTreeContext(ctx, a, b)
	if err != nil {
		return 0, s.cause(err)
	}
	return len(chs), nil
}
