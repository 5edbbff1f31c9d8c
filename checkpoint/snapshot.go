package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Limits of a checkpoint, unless Options say otherwise.
const (
	// DefaultMaxFile bounds one file's size, in bytes.
	DefaultMaxFile = 100 << 20
	// DefaultMaxBytes bounds the total size of a checkpoint's files.
	DefaultMaxBytes = 4 << 30
	// DefaultMaxFiles bounds the number of files in a checkpoint.
	DefaultMaxFiles = 200_000
)

// Options adjust Snapshot. The zero value (and nil) uses the defaults.
type Options struct {
	// Include are gitignore-style patterns of paths kept even when a
	// .gitignore ignores them (the CLI's --checkpoint-include). .git and
	// the top-level .outpost are never kept.
	Include []string
	// MaxFile, MaxBytes and MaxFiles bound one file, the whole tree and
	// its file count (ErrTooLarge); zero means the default.
	MaxFile  int64
	MaxBytes int64
	MaxFiles int
	// Mask returns a file's content with known secret values masked
	// (credentials.Redactor.Mask); nil stores content as it is.
	Mask func([]byte) []byte
	// Skip are absolute directories left out (a provider's own state
	// inside the workspace).
	Skip []string
	// Index is the stat cache's file (IndexPath): files whose size,
	// times, inode and mode are those recorded there are not read again.
	// Empty: every file is read.
	Index string
}

func (o *Options) maxFile() int64 {
	if o.MaxFile > 0 {
		return o.MaxFile
	}
	return DefaultMaxFile
}

func (o *Options) maxBytes() int64 {
	if o.MaxBytes > 0 {
		return o.MaxBytes
	}
	return DefaultMaxBytes
}

func (o *Options) maxFiles() int {
	if o.MaxFiles > 0 {
		return o.MaxFiles
	}
	return DefaultMaxFiles
}

// Tree is a workspace recorded as a git tree.
type Tree struct {
	Hash  plumbing.Hash
	Files int   // files and links kept
	Bytes int64 // their total size (as stored)
	// Written counts the objects this snapshot added to the store, and
	// WrittenBytes their content's size: what the store grew by.
	Written      int
	WrittenBytes int64
}

// entry is one file or link of the workspace.
type entry struct {
	rel  string // slash-separated, relative
	mode filemode.FileMode
	st   stat
	hash plumbing.Hash
	size int64    // stored size
	node *memNode // its content, from a tar stream (SnapshotTar)
}

// Snapshot records the workspace dir (on this machine) in objs and returns
// its tree. Files are read only where the stat cache (Options.Index) does
// not already know them; blobs and trees already stored are not written
// again. Errors: ErrTooLarge (naming the file, or the tree's total), a
// read error of the workspace, or the store's.
func Snapshot(ctx context.Context, objs Objects, dir string, o *Options) (Tree, error) {
	if o == nil {
		o = &Options{}
	}
	started := time.Now()
	w := newWalker(o, dirSource{root: dir})
	for _, s := range o.Skip {
		w.skip[filepath.Clean(s)] = true
	}
	if err := w.walk(ctx, "", nil); err != nil {
		return Tree{}, err
	}
	idx := loadIndex(ctx, objs, o.Index, dir)
	if err := hashEntries(ctx, objs, dir, w.entries, idx, o); err != nil {
		return Tree{}, err
	}
	t, err := store(ctx, objs, w.entries, o)
	if err != nil {
		return Tree{}, err
	}
	t.Written, t.WrittenBytes = t.Written+idx.written.n, t.WrittenBytes+idx.written.bytes
	if o.Index != "" {
		saveIndex(o.Index, dir, started, t.Hash, w.entries)
	}
	return t, nil
}

// store writes the trees of entries whose blobs are stored, and counts
// them.
func store(ctx context.Context, objs Objects, es []entry, o *Options) (Tree, error) {
	t := Tree{Files: len(es)}
	for _, e := range es {
		t.Bytes += e.size
	}
	if t.Bytes > o.maxBytes() {
		return Tree{}, fmt.Errorf("%w: the workspace holds %d bytes, over the checkpoint limit of %d", ErrTooLarge, t.Bytes, o.maxBytes())
	}
	h, trees, err := buildTrees(es)
	if err != nil {
		return Tree{}, err
	}
	written, err := writeMissing(ctx, objs, trees)
	if err != nil {
		return Tree{}, err
	}
	t.Hash, t.Written, t.WrittenBytes = h, written.n, written.bytes
	return t, nil
}

// source is a workspace the walker lists: a directory on this machine, or
// a tar stream read into memory (SnapshotTar).
type source interface {
	// list returns the directory rel's entries ("" the root), sorted by
	// name, and what releases them.
	list(rel string) ([]srcEntry, func(), error)
	// gitignore is the directory rel's .gitignore, if it has one.
	gitignore(rel string) ([]byte, bool)
	// stat is a non-directory entry's stat; false when it vanished.
	stat(e srcEntry) (stat, bool)
}

// srcEntry is one entry of a source's directory.
type srcEntry struct {
	name string
	dir  bool
	at   *os.File // dirSource: the open directory holding it
	node *memNode // tarSource: the entry
}

// dirSource is a directory on this machine.
type dirSource struct{ root string }

func (d dirSource) list(rel string) ([]srcEntry, func(), error) {
	f, err := os.Open(filepath.Join(d.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, nil, err
	}
	des, err := f.ReadDir(-1)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	out := make([]srcEntry, len(des))
	for i, de := range des {
		out[i] = srcEntry{name: de.Name(), dir: de.IsDir(), at: f}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, func() { f.Close() }, nil
}

func (d dirSource) gitignore(rel string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(d.root, filepath.FromSlash(rel), ".gitignore"))
	return b, err == nil
}

func (d dirSource) stat(e srcEntry) (stat, bool) { return statAt(e.at, e.name) }

// walker lists a workspace's files in lexical order, leaving out what a
// checkpoint does not keep.
type walker struct {
	o       *Options
	src     source
	root    string          // a dirSource's root, for Skip
	skip    map[string]bool // absolute directories left out (a dirSource's)
	include []gitignore.Pattern
	entries []entry
}

func newWalker(o *Options, src source) *walker {
	w := &walker{o: o, src: src, skip: map[string]bool{}}
	if d, ok := src.(dirSource); ok {
		w.root = d.root
	}
	for _, p := range o.Include {
		w.include = append(w.include, gitignore.ParsePattern(p, nil))
	}
	return w
}

// walk lists the directory rel (relative, "" for the root) with the
// ignore patterns in force above it.
func (w *walker) walk(ctx context.Context, rel string, ps []gitignore.Pattern) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	des, done, err := w.src.list(rel)
	if err != nil {
		if rel != "" && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
			return nil // vanished or unreadable below the root
		}
		return fmt.Errorf("checkpoint: read %s: %w", displayPath(rel), err)
	}
	defer done()
	ps = w.patterns(rel, ps)
	m := gitignore.NewMatcher(ps)
	for _, de := range des {
		crel := path.Join(rel, de.name)
		if de.name == ".git" || crel == ".outpost" {
			continue
		}
		parts := strings.Split(crel, "/")
		if m.Match(parts, de.dir) && !w.included(parts, de.dir) {
			continue
		}
		if de.dir {
			if w.root != "" && w.skip[filepath.Join(w.root, filepath.FromSlash(crel))] {
				continue
			}
			if err := w.walk(ctx, crel, ps); err != nil {
				return err
			}
			continue
		}
		if err := w.add(crel, de); err != nil {
			return err
		}
	}
	return nil
}

// add records one non-directory entry; special files are left out.
func (w *walker) add(rel string, de srcEntry) error {
	st, ok := w.src.stat(de)
	if !ok {
		return nil // vanished
	}
	var mode filemode.FileMode
	switch fs.FileMode(st.Mode).Type() {
	case 0:
		mode = filemode.Regular
		if st.Mode&0o100 != 0 {
			mode = filemode.Executable
		}
		if st.Size > w.o.maxFile() {
			return fmt.Errorf("%w: %s holds %d bytes, over the per-file limit of %d", ErrTooLarge, rel, st.Size, w.o.maxFile())
		}
	case fs.ModeSymlink:
		mode = filemode.Symlink
	default:
		return nil
	}
	if len(w.entries) >= w.o.maxFiles() {
		return fmt.Errorf("%w: the workspace holds more than %d files, the checkpoint limit", ErrTooLarge, w.o.maxFiles())
	}
	w.entries = append(w.entries, entry{rel: rel, mode: mode, st: st, node: de.node})
	return nil
}

// patterns adds the directory's .gitignore to the patterns in force.
func (w *walker) patterns(rel string, ps []gitignore.Pattern) []gitignore.Pattern {
	b, ok := w.src.gitignore(rel)
	if !ok {
		return ps
	}
	var domain []string
	if rel != "" {
		domain = strings.Split(rel, "/")
	}
	out := append([]gitignore.Pattern(nil), ps...)
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, gitignore.ParsePattern(line, domain))
	}
	return out
}

// included reports whether an Include pattern keeps an ignored path (or
// a directory on the way to one).
func (w *walker) included(parts []string, isDir bool) bool {
	for _, p := range w.include {
		if p.Match(parts, isDir) == gitignore.Exclude {
			return true
		}
	}
	if isDir {
		// A directory is walked when an Include pattern could match below it.
		for _, raw := range w.o.Include {
			if strings.HasPrefix(strings.TrimPrefix(raw, "/"), strings.Join(parts, "/")+"/") {
				return true
			}
		}
	}
	return false
}

func displayPath(rel string) string {
	if rel == "" {
		return "the workspace"
	}
	return rel
}

// counted is a number of objects and their bytes.
type counted struct {
	n     int
	bytes int64
}

// hashEntries finds every entry's blob: from the stat cache where it
// knows the file as it is, otherwise by reading it, in parallel, writing
// the blobs the store lacks in batches.
func hashEntries(ctx context.Context, objs Objects, dir string, es []entry, idx *index, o *Options) error {
	var todo []int
	for i := range es {
		if h, size, ok := idx.lookup(es[i].rel, es[i].st); ok {
			es[i].hash, es[i].size = h, size
			continue
		}
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0)*2, len(todo))
	jobs := make(chan int)
	errs := make(chan error, workers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &batch{objs: objs}
			for i := range jobs {
				if err := readBlob(cctx, dir, &es[i], o, b); err != nil {
					errs <- err
					cancel()
					for range jobs {
					}
					return
				}
			}
			if err := b.flush(cctx); err != nil {
				errs <- err
				cancel()
			}
			mu.Lock()
			idx.written.n += b.written.n
			idx.written.bytes += b.written.bytes
			mu.Unlock()
		}()
	}
feed:
	for _, i := range todo {
		select {
		case jobs <- i:
		case <-cctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// readBlob reads one entry's content (a link's target for a link), masks
// it, and adds its blob to the batch.
func readBlob(ctx context.Context, dir string, e *entry, o *Options, b *batch) error {
	p := filepath.Join(dir, filepath.FromSlash(e.rel))
	var data []byte
	var err error
	if e.node != nil {
		data = e.node.data
	} else if e.mode == filemode.Symlink {
		var target string
		target, err = os.Readlink(p)
		data = []byte(target)
	} else {
		data, err = readRegular(p, o.maxFile())
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return fmt.Errorf("%w: %s: %w", ErrTooLarge, e.rel, err)
		}
		return fmt.Errorf("checkpoint: read %s: %w", e.rel, err)
	}
	if o.Mask != nil && e.mode != filemode.Symlink {
		data = o.Mask(data)
	}
	obj := NewObject(plumbing.BlobObject, data)
	e.hash, e.size = obj.Hash, int64(len(data))
	return b.add(ctx, obj)
}

// readRegular reads a regular file without following a link put in its
// place, refusing one that grew over max.
func readRegular(p string, max int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+1))
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("%w: over the per-file limit of %d bytes", ErrTooLarge, max)
	}
	return buf.Bytes(), nil
}

// batch collects objects and writes those the store lacks, about every
// batchBytes.
type batch struct {
	objs    Objects
	pending []Object
	size    int64
	written counted
}

const batchBytes = 16 << 20

func (b *batch) add(ctx context.Context, o Object) error {
	b.pending = append(b.pending, o)
	b.size += int64(len(o.Data))
	if b.size >= batchBytes || len(b.pending) >= 512 {
		return b.flush(ctx)
	}
	return nil
}

func (b *batch) flush(ctx context.Context) error {
	if len(b.pending) == 0 {
		return nil
	}
	c, err := writeMissing(ctx, b.objs, b.pending)
	b.written.n += c.n
	b.written.bytes += c.bytes
	b.pending, b.size = b.pending[:0], 0
	return err
}

// writeMissing writes those of objects the store lacks.
func writeMissing(ctx context.Context, objs Objects, os_ []Object) (counted, error) {
	hs := make([]plumbing.Hash, len(os_))
	for i, o := range os_ {
		hs[i] = o.Hash
	}
	miss, err := objs.Missing(ctx, hs)
	if err != nil {
		return counted{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if len(miss) == 0 {
		return counted{}, nil
	}
	want := make(map[plumbing.Hash]bool, len(miss))
	for _, h := range miss {
		want[h] = true
	}
	var out []Object
	var c counted
	for _, o := range os_ {
		if want[o.Hash] {
			delete(want, o.Hash)
			out = append(out, o)
			c.n++
			c.bytes += int64(len(o.Data))
		}
	}
	if err := objs.Write(ctx, out); err != nil {
		return counted{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return c, nil
}

// buildTrees makes the tree objects of the entries (in walk order) and
// returns the root's hash with every tree object. An empty workspace is
// the empty tree.
func buildTrees(es []entry) (plumbing.Hash, []Object, error) {
	type dirNode struct {
		entries []object.TreeEntry
	}
	dirs := map[string]*dirNode{"": {}}
	var order []string // directories, parents before children
	var ensure func(d string) *dirNode
	ensure = func(d string) *dirNode {
		if n, ok := dirs[d]; ok {
			return n
		}
		ensure(parentDir(d))
		n := &dirNode{}
		dirs[d] = n
		order = append(order, d)
		return n
	}
	for _, e := range es {
		n := ensure(parentDir(e.rel))
		n.entries = append(n.entries, object.TreeEntry{Name: path.Base(e.rel), Mode: e.mode, Hash: e.hash})
	}
	var objs []Object
	// Children before parents: the reverse of creation order.
	for i := len(order) - 1; i >= -1; i-- {
		d := ""
		if i >= 0 {
			d = order[i]
		}
		obj, err := encodeTree(dirs[d].entries)
		if err != nil {
			return plumbing.ZeroHash, nil, err
		}
		objs = append(objs, obj)
		if d == "" {
			return obj.Hash, objs, nil
		}
		p := dirs[parentDir(d)]
		p.entries = append(p.entries, object.TreeEntry{Name: path.Base(d), Mode: filemode.Dir, Hash: obj.Hash})
	}
	panic("unreachable")
}

func parentDir(rel string) string {
	d := path.Dir(rel)
	if d == "." {
		return ""
	}
	return d
}

// encodeTree encodes a tree object, its entries in git's order (a
// directory sorts as if its name ended in "/").
func encodeTree(es []object.TreeEntry) (Object, error) {
	sort.Slice(es, func(i, j int) bool { return treeKey(es[i]) < treeKey(es[j]) })
	t := &object.Tree{Entries: es}
	return encoded(plumbing.TreeObject, t.Encode)
}

func treeKey(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}
