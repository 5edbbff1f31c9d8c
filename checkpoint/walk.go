package checkpoint

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Reachable returns every object reachable from roots, each once, read
// and verified through objs: a commit leads to its tree and its parents, a
// tree to its entries (a submodule's entry, mode gitlink, names a commit
// of another repository and is skipped), an annotated tag to its target.
// Roots may be commits, trees, blobs or tags; zero hashes are ignored.
// The order is breadth first from the roots, so an object comes before
// the objects it refers to: writing the result in reverse never stores an
// object before what it needs.
//
// An object that is not stored is ErrNotFound, naming it and what refers
// to it; one that does not hash to its id, cannot be decoded or is not of
// the type its referrer says (a tree entry of mode 040000 must be a tree,
// a commit's parent a commit) is ErrCorrupt.
//
// Every object is held in memory: the result is what an export carries.
func Reachable(ctx context.Context, objs Objects, roots []plumbing.Hash) ([]Object, error) {
	type item struct {
		h    plumbing.Hash
		want plumbing.ObjectType // AnyObject for a root
		from string              // who refers to it, for errors
	}
	seen := make(map[plumbing.Hash]bool)
	var queue []item
	push := func(h plumbing.Hash, want plumbing.ObjectType, from string) {
		if h.IsZero() || seen[h] {
			return
		}
		seen[h] = true
		queue = append(queue, item{h, want, from})
	}
	for _, r := range roots {
		push(r, plumbing.AnyObject, "")
	}
	var out []Object
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o, err := objs.Read(ctx, it.h)
		if err != nil {
			if it.from != "" {
				return nil, fmt.Errorf("%w (referred to by %s)", err, it.from)
			}
			return nil, err
		}
		if o.Hash != it.h {
			return nil, fmt.Errorf("%w: read of object %s returned %s", ErrCorrupt, it.h, o.Hash)
		}
		if it.want != plumbing.AnyObject && o.Type != it.want {
			return nil, fmt.Errorf("%w: object %s is a %s, but %s refers to it as a %s", ErrCorrupt, it.h, o.Type, it.from, it.want)
		}
		out = append(out, o)
		switch o.Type {
		case plumbing.CommitObject:
			c := &object.Commit{}
			if err := c.Decode(walkDecodable(o)); err != nil {
				return nil, fmt.Errorf("%w: commit %s: %w", ErrCorrupt, o.Hash, err)
			}
			if c.TreeHash.IsZero() || slices.ContainsFunc(c.ParentHashes, plumbing.Hash.IsZero) {
				return nil, fmt.Errorf("%w: commit %s names no tree or a null parent", ErrCorrupt, o.Hash)
			}
			from := "commit " + o.Hash.String()
			push(c.TreeHash, plumbing.TreeObject, from)
			for _, p := range c.ParentHashes {
				push(p, plumbing.CommitObject, from)
			}
		case plumbing.TreeObject:
			t := &object.Tree{}
			if err := t.Decode(walkDecodable(o)); err != nil {
				return nil, fmt.Errorf("%w: tree %s: %w", ErrCorrupt, o.Hash, err)
			}
			for _, e := range t.Entries {
				from := fmt.Sprintf("entry %q of tree %s", e.Name, o.Hash)
				if e.Hash.IsZero() {
					return nil, fmt.Errorf("%w: %s is null", ErrCorrupt, from)
				}
				switch e.Mode {
				case filemode.Submodule:
					// Another repository's commit: not ours to carry.
				case filemode.Dir:
					push(e.Hash, plumbing.TreeObject, from)
				default:
					push(e.Hash, plumbing.BlobObject, from)
				}
			}
		case plumbing.TagObject:
			tg := &object.Tag{}
			if err := tg.Decode(walkDecodable(o)); err != nil {
				return nil, fmt.Errorf("%w: tag %s: %w", ErrCorrupt, o.Hash, err)
			}
			push(tg.Target, tg.TargetType, "tag "+o.Hash.String())
		}
	}
	return out, nil
}

// walkDecodable is o in go-git's form, for its decoders.
func walkDecodable(o Object) *plumbing.MemoryObject {
	mo := &plumbing.MemoryObject{}
	mo.SetType(o.Type)
	_, _ = mo.Write(o.Data)
	return mo
}
