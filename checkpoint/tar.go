package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
)

// ErrSpill is SnapshotTar's answer for a stream it does not record from
// memory: more file content than its Budget allows, or an entry it leaves to a
// directory's rules (a hard link, a name given twice, a path through a
// link, a directory or file its owner cannot read). The caller records
// the workspace from a directory instead (the stream extracted).
var ErrSpill = errors.New("checkpoint: the workspace's stream is recorded from a directory")

// TarReader is a tar stream read entry by entry, as archive/tar's Reader
// reads it, each header checked and made safe to extract by the reader
// (internal/tarsafe.Reader in the engine: a clean relative
// name, permission bits only, no device); io.EOF at its end.
type TarReader interface {
	Next() (*tar.Header, error)
	io.Reader
}

// SnapshotTar records in objs the workspace that tr carries: a sandbox's
// copy of its workspace directory, every entry below one top-level name
// (the directory's own). It gives the tree Snapshot gives for that stream
// extracted into a directory, with the same rules (.gitignore, Include,
// .git and the top-level .outpost left out, the limits, Mask), without
// writing the files anywhere: the stream's file content is held in
// memory, as far as b allows (ErrSpill beyond). Options.Skip and Index do
// not apply (they name directories of this machine). A refused entry or
// a broken stream is an error, as its extraction is.
func SnapshotTar(ctx context.Context, objs Objects, tr TarReader, o *Options, b *Budget) (Tree, error) {
	if o == nil {
		o = &Options{}
	}
	held := &hold{b: b}
	defer held.release()
	top, err := readTar(ctx, tr, held)
	if err != nil {
		return Tree{}, err
	}
	if len(top.children) != 1 {
		return Tree{}, fmt.Errorf("checkpoint: the workspace's stream holds %d top-level entries, not its directory", len(top.children))
	}
	var root *memNode
	for _, n := range top.children {
		root = n
	}
	w := newWalker(o, tarSource{root: root})
	if err := w.walk(ctx, "", nil); err != nil {
		return Tree{}, err
	}
	idx := &index{}
	if err := hashEntries(ctx, objs, "", w.entries, idx, o); err != nil {
		return Tree{}, err
	}
	t, err := store(ctx, objs, w.entries, o)
	if err != nil {
		return Tree{}, err
	}
	t.Written, t.WrittenBytes = t.Written+idx.written.n, t.WrittenBytes+idx.written.bytes
	return t, nil
}

// Budget bounds the file content that SnapshotTar holds in memory: in all,
// across the calls sharing it (a server's concurrent turns), and in one
// call. Its methods are safe for concurrent use.
type Budget struct {
	mu      sync.Mutex
	left    int64
	perCall int64
}

// NewBudget is a budget of total bytes at once, at most perCall of them
// in one SnapshotTar.
func NewBudget(total, perCall int64) *Budget {
	return &Budget{left: total, perCall: perCall}
}

// hold is what one SnapshotTar took of its budget.
type hold struct {
	b    *Budget
	took int64
}

// take takes n more bytes, or nothing and false when the call or the
// budget would go over.
func (h *hold) take(n int64) bool {
	if h.b == nil || h.took+n > h.b.perCall {
		return false
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if n > h.b.left {
		return false
	}
	h.b.left -= n
	h.took += n
	return true
}

// release gives back what the call took.
func (h *hold) release() {
	if h.b == nil || h.took == 0 {
		return
	}
	h.b.mu.Lock()
	h.b.left += h.took
	h.b.mu.Unlock()
	h.took = 0
}

// memNode is an entry of a tar stream read into memory.
type memNode struct {
	dir      bool
	link     bool   // a symbolic link; data is its target
	perm     uint32 // permission bits
	data     []byte
	children map[string]*memNode
}

// readTar reads a tar stream into a tree of memNodes under an unnamed
// root, or ErrSpill.
func readTar(ctx context.Context, tr TarReader, held *hold) (*memNode, error) {
	root := &memNode{dir: true, perm: 0o700, children: map[string]*memNode{}}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return root, nil
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: the workspace's stream: %w", err)
		}
		if h.Name == "." || h.Typeflag == tar.TypeXHeader || h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if path.Clean(h.Name) != h.Name || path.IsAbs(h.Name) || h.Name == ".." || strings.HasPrefix(h.Name, "../") {
			return nil, fmt.Errorf("checkpoint: the workspace's stream: %w: entry %q", ErrUnsafe, h.Name)
		}
		perm := uint32(h.Mode) & 0o777
		parent, name := path.Split(h.Name)
		dir, ok := root.mkdirs(strings.TrimSuffix(parent, "/"))
		if !ok {
			return nil, ErrSpill
		}
		old := dir.children[name]
		switch h.Typeflag {
		case tar.TypeDir:
			if old != nil && !old.dir || perm&0o700 != 0o700 {
				return nil, ErrSpill // replaced, or closed to its owner
			}
			if old == nil {
				dir.children[name] = &memNode{dir: true, perm: perm, children: map[string]*memNode{}}
			}
			continue
		case tar.TypeSymlink:
			if old != nil || name == ".gitignore" { // os.ReadFile would follow it
				return nil, ErrSpill
			}
			dir.children[name] = &memNode{link: true, perm: 0o777, data: []byte(h.Linkname)}
			continue
		case tar.TypeReg, tar.TypeRegA:
		default: // a hard link: the directory's rules
			return nil, ErrSpill
		}
		if old != nil || perm&0o400 == 0 {
			return nil, ErrSpill
		}
		if h.Size < 0 || !held.take(h.Size) {
			return nil, ErrSpill
		}
		buf := bytes.NewBuffer(make([]byte, 0, h.Size))
		if _, err := buf.ReadFrom(tr); err != nil {
			return nil, fmt.Errorf("checkpoint: the workspace's stream: reading %s: %w", h.Name, err)
		}
		dir.children[name] = &memNode{perm: perm, data: buf.Bytes()}
	}
}

// mkdirs returns the directory rel below n ("" n itself), making the
// missing ones as an extraction does (owner-only); false when a name on
// the way is not a directory.
func (n *memNode) mkdirs(rel string) (*memNode, bool) {
	if rel == "" {
		return n, true
	}
	for _, name := range strings.Split(rel, "/") {
		c := n.children[name]
		if c == nil {
			c = &memNode{dir: true, perm: 0o700, children: map[string]*memNode{}}
			n.children[name] = c
		}
		if !c.dir {
			return nil, false
		}
		n = c
	}
	return n, true
}

// tarSource is a workspace read from a tar stream: the walker's source.
type tarSource struct{ root *memNode }

func (t tarSource) find(rel string) *memNode {
	n := t.root
	if rel == "" {
		return n
	}
	for _, name := range strings.Split(rel, "/") {
		if n == nil || !n.dir {
			return nil
		}
		n = n.children[name]
	}
	return n
}

func (t tarSource) list(rel string) ([]srcEntry, func(), error) {
	n := t.find(rel)
	switch {
	case n == nil:
		return nil, nil, fs.ErrNotExist
	case !n.dir:
		return nil, nil, errors.New("not a directory")
	}
	out := make([]srcEntry, 0, len(n.children))
	for name, c := range n.children {
		out = append(out, srcEntry{name: name, dir: c.dir, node: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, func() {}, nil
}

// gitignore is the directory's .gitignore when it is a regular file (a
// link there spilled in readTar).
func (t tarSource) gitignore(rel string) ([]byte, bool) {
	n := t.find(path.Join(rel, ".gitignore"))
	if n == nil || n.dir || n.link {
		return nil, false
	}
	return n.data, true
}

func (t tarSource) stat(e srcEntry) (stat, bool) {
	n := e.node
	mode := fs.FileMode(n.perm)
	if n.link {
		mode |= fs.ModeSymlink
	}
	return stat{Size: int64(len(n.data)), Mode: uint32(mode)}, true
}
