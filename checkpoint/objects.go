package checkpoint

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Object is one git object: its type, its id (the SHA-1 of its header and
// content, as git computes it) and its content, without the header.
type Object struct {
	Type plumbing.ObjectType
	Hash plumbing.Hash
	Data []byte
}

// NewObject makes an object of type t with content data, computing its id.
func NewObject(t plumbing.ObjectType, data []byte) Object {
	return Object{Type: t, Hash: plumbing.ComputeHash(t, data), Data: data}
}

// encoded makes an object of type t from an encoder of go-git's object
// layer (object.Tree.Encode, object.Commit.Encode).
func encoded(t plumbing.ObjectType, enc func(plumbing.EncodedObject) error) (Object, error) {
	mo := &plumbing.MemoryObject{}
	mo.SetType(t)
	if err := enc(mo); err != nil {
		return Object{}, err
	}
	r, err := mo.Reader()
	if err != nil {
		return Object{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Object{}, err
	}
	return NewObject(t, data), nil
}

// Verify checks that o's id is the hash of its type and content: a stored
// object that fails it is corrupt (ErrCorrupt).
func (o Object) Verify() error {
	if !o.Type.Valid() {
		return fmt.Errorf("%w: object %s has no valid type", ErrCorrupt, o.Hash)
	}
	if got := plumbing.ComputeHash(o.Type, o.Data); got != o.Hash {
		return fmt.Errorf("%w: object %s hashes to %s", ErrCorrupt, o.Hash, got)
	}
	return nil
}

// Objects is where checkpoints keep their git objects: content-addressed,
// so a blob two checkpoints share (or two conversations, or two forks) is
// stored once. Each conversation store provides one beside its
// conversations (conversation.ObjectStorer): a directory store keeps a
// bare git repository (Dir), PostgreSQL a table, so a fleet shares
// checkpoints as it shares conversations.
//
// Implementations are safe for concurrent use and pass the suite in
// checkpoint/objectstest. Every method checks ctx first.
type Objects interface {
	// Missing returns those of hashes that are not stored, in their order.
	Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error)
	// Read returns one object, verified against its id. Not stored:
	// ErrNotFound; damaged: ErrCorrupt.
	Read(ctx context.Context, h plumbing.Hash) (Object, error)
	// Write stores objects; one already stored is kept as it is (ids are
	// content hashes). It writes all or, on error, possibly some: a
	// partial write leaves only whole objects, never a damaged one.
	Write(ctx context.Context, objs []Object) error
}

// Namer is implemented by object stores that can name a checkpoint the way
// git tools see it (Dir: refs/outpost/...), so `git log` and `git fsck`
// in the store's repository reach every checkpoint.
type Namer interface {
	Name(ctx context.Context, ref string, h plumbing.Hash) error
}

// Dir is an object store in a bare git repository on this machine: loose
// objects in git's own format (zlib, "type size\\0content", at
// objects/xx/yyyy), so git itself reads it (`git --git-dir DIR fsck`,
// `git --git-dir DIR log refs/outpost/...`). Objects git has packed
// (after a `git gc` there) are read through go-git's storage. Each
// object is written to a temporary file and renamed into place, so a
// reader never sees a partial one and writers run in parallel.
//
// A Dir remembers the objects it wrote or found (up to knownMax of them):
// outpost never removes an object, so a turn's checkpoint asks the disk
// only about objects it has not seen, and the packs are looked in only
// when the repository had any when it was opened (one packed later, by a
// `git gc` there, is written again loose: a copy, never a loss).
type Dir struct {
	path   string
	once   sync.Once
	err    error
	mu     sync.Mutex // go-git's storage is not safe for concurrent use
	st     *filesystem.Storage
	packed bool     // objects/pack held a pack when opened
	dirs   sync.Map // objects/xx made, by first byte

	knownMu sync.Mutex
	known   map[plumbing.Hash]struct{}
}

// knownMax bounds what a Dir remembers (about 50 bytes an object): past
// it, it forgets all and starts again.
const knownMax = 1 << 16

func (d *Dir) isKnown(h plumbing.Hash) bool {
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	_, ok := d.known[h]
	return ok
}

func (d *Dir) remember(h plumbing.Hash) {
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	if d.known == nil || len(d.known) >= knownMax {
		d.known = make(map[plumbing.Hash]struct{})
	}
	d.known[h] = struct{}{}
}

// NewDir returns the object store in the bare repository at path, made
// when first written.
func NewDir(path string) *Dir { return &Dir{path: path} }

// Path is the repository's directory.
func (d *Dir) Path() string { return d.path }

func (d *Dir) open() error {
	d.once.Do(func() {
		for _, sub := range []string{"objects", "refs"} {
			if err := os.MkdirAll(filepath.Join(d.path, sub), 0o700); err != nil {
				d.err = fmt.Errorf("checkpoint: object store: %w", err)
				return
			}
		}
		head := filepath.Join(d.path, "HEAD")
		if _, err := os.Stat(head); errors.Is(err, os.ErrNotExist) {
			// A bare repository git recognises: HEAD and a config.
			_ = os.WriteFile(head, []byte("ref: refs/heads/main\n"), 0o600)
			_ = os.WriteFile(filepath.Join(d.path, "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = true\n"), 0o600)
		}
		d.st = filesystem.NewStorage(osfs.New(d.path), cache.NewObjectLRU(4*cache.MiByte))
		packs, _ := filepath.Glob(filepath.Join(d.path, "objects", "pack", "*.pack"))
		d.packed = len(packs) > 0
	})
	return d.err
}

func (d *Dir) loose(h plumbing.Hash) string {
	s := h.String()
	return filepath.Join(d.path, "objects", s[:2], s[2:])
}

func (d *Dir) Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := d.open(); err != nil {
		return nil, err
	}
	var out []plumbing.Hash
	for _, h := range hashes {
		if !d.has(h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// has looks among the objects known, for a loose object file, then in
// git's packs.
func (d *Dir) has(h plumbing.Hash) bool {
	if d.isKnown(h) {
		return true
	}
	if _, err := os.Stat(d.loose(h)); err == nil {
		d.remember(h)
		return true
	}
	if !d.packed {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.HasEncodedObject(h) == nil
}

func (d *Dir) Read(ctx context.Context, h plumbing.Hash) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	if err := d.open(); err != nil {
		return Object{}, err
	}
	f, err := os.Open(d.loose(h))
	if errors.Is(err, fs.ErrNotExist) {
		return d.readPacked(h)
	}
	if err != nil {
		return Object{}, fmt.Errorf("checkpoint: object %s: %w", h, err)
	}
	defer f.Close()
	r, err := objfile.NewReader(f)
	if err != nil {
		return Object{}, fmt.Errorf("%w: object %s: %w", ErrCorrupt, h, err)
	}
	defer r.Close()
	t, size, err := r.Header()
	if err != nil || size < 0 || size > maxObject {
		return Object{}, fmt.Errorf("%w: object %s: bad header (%v)", ErrCorrupt, h, err)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return Object{}, fmt.Errorf("%w: object %s: %w", ErrCorrupt, h, err)
	}
	o := Object{Type: t, Hash: h, Data: data}
	if err := o.Verify(); err != nil {
		return Object{}, err
	}
	return o, nil
}

// maxObject bounds an object's size as read from its header.
const maxObject = 1 << 34

// readPacked reads an object git has packed.
func (d *Dir) readPacked(h plumbing.Hash) (Object, error) {
	d.mu.Lock()
	eo, err := d.st.EncodedObject(plumbing.AnyObject, h)
	d.mu.Unlock()
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, h)
	}
	if err != nil {
		return Object{}, fmt.Errorf("%w: object %s: %w", ErrCorrupt, h, err)
	}
	r, err := eo.Reader()
	if err != nil {
		return Object{}, fmt.Errorf("%w: object %s: %w", ErrCorrupt, h, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return Object{}, fmt.Errorf("%w: object %s: %w", ErrCorrupt, h, err)
	}
	o := Object{Type: eo.Type(), Hash: h, Data: data}
	if err := o.Verify(); err != nil {
		return Object{}, err
	}
	return o, nil
}

func (d *Dir) Write(ctx context.Context, objs []Object) error {
	if err := d.open(); err != nil {
		return err
	}
	for _, o := range objs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.isKnown(o.Hash) {
			continue
		}
		if _, err := os.Stat(d.loose(o.Hash)); err == nil {
			d.remember(o.Hash)
			continue
		}
		if err := d.writeLoose(o); err != nil {
			return fmt.Errorf("checkpoint: object store: %w", err)
		}
		d.remember(o.Hash)
	}
	return nil
}

// zlibWriters keeps compressors between objects: each holds about a
// megabyte of state.
var zlibWriters = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed)
	return zw
}}

// writeLoose writes one object as git does with core.looseCompression 1.
func (d *Dir) writeLoose(o Object) error {
	p := d.loose(o.Hash)
	if _, ok := d.dirs.Load(o.Hash[0]); !ok {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		d.dirs.Store(o.Hash[0], true)
	}
	tmp, err := createTemp(filepath.Dir(p))
	if err != nil {
		return err
	}
	zw := zlibWriters.Get().(*zlib.Writer)
	zw.Reset(tmp)
	_, err = zw.Write(fmt.Appendf(nil, "%s %d\x00", o.Type, len(o.Data)))
	if err == nil {
		_, err = zw.Write(o.Data)
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	zw.Reset(io.Discard)
	zlibWriters.Put(zw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// tmpSeq numbers this process's temporary object files.
var tmpSeq atomic.Uint64

// createTemp makes a new temporary object file in dir, read-only from the
// start as git makes loose objects (no chmod after), named by this
// process and a sequence number (no random name, no retry but on a name
// a crashed process with the same id left behind).
func createTemp(dir string) (*os.File, error) {
	for {
		name := filepath.Join(dir, fmt.Sprintf("tmp_obj_%d_%d", os.Getpid(), tmpSeq.Add(1)))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o444)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// Name points the reference ref (refs/outpost/...) at h.
func (d *Dir) Name(ctx context.Context, ref string, h plumbing.Hash) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.open(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(ref), h))
}

// Memory is an object store in memory, for tests and for the objects of
// one call that need no keeping.
type Memory struct {
	mu   sync.RWMutex
	objs map[plumbing.Hash]Object
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{objs: map[plumbing.Hash]Object{}} }

func (m *Memory) Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []plumbing.Hash
	for _, h := range hashes {
		if _, ok := m.objs[h]; !ok {
			out = append(out, h)
		}
	}
	return out, nil
}

func (m *Memory) Read(ctx context.Context, h plumbing.Hash) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	m.mu.RLock()
	o, ok := m.objs[h]
	m.mu.RUnlock()
	if !ok {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, h)
	}
	if err := o.Verify(); err != nil {
		return Object{}, err
	}
	return Object{Type: o.Type, Hash: o.Hash, Data: bytes.Clone(o.Data)}, nil
}

func (m *Memory) Write(ctx context.Context, objs []Object) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range objs {
		if _, ok := m.objs[o.Hash]; !ok {
			m.objs[o.Hash] = Object{Type: o.Type, Hash: o.Hash, Data: bytes.Clone(o.Data)}
		}
	}
	return nil
}

// Len is the number of objects stored.
func (m *Memory) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.objs)
}
