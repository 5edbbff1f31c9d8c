package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/internal/bufpool"
	"github.com/outposthq/outpost/internal/storeops"
)

// convExt is the file name extension of a stored conversation.
const convExt = ".conv"

// FS is the filesystem Store, outpost's default. Each conversation is one
// file, <dir>/<id>.conv, a tar (the same one Export gzips) holding exactly:
//
//	meta.json     first: {"format": "outpost.conversation", "version": 1,
//	              "meta": {...Meta...}, "files": [{"path", "mode", "size",
//	              "sha256"}, ...]}
//	files/<path>  then each file, in that order, <path> home-relative
//
// An export of a conversation with checkpoints (Export) is version 2: its
// meta.json also declares "objects": {"count", "bytes"}, and after the
// files come that many git objects, one entry each:
//
//	objects/<id>.<type>  the object's content without git's header;
//	              <id> its 40-digit SHA-1 id, <type> blob, tree,
//	              commit or tag
//
// A stored conversation is always version 1 and holds no objects: they
// are in the store's repository (Objects).
//
// The file list in meta.json is authoritative: a reader requires exactly
// those entries, sizes and digests, so truncation (even at an entry
// boundary) and corruption are reported as ErrInvalid; so are the object
// count and size, and every object's id is checked against its content.
// A reader refuses a version it does not know; the version changes for
// any change an older reader would misread, while added JSON fields keep
// it.
//
// Put writes a temporary file in dir (".put-<id>-*", ignored by every
// reader), fsyncs it, then, holding the store's write lock (an flock on
// dir/.lock), checks the stored revision, renames the file over <id>.conv
// and fsyncs dir: readers in any process see the old version or the new
// one, never a partial file, and of concurrent writers from one revision
// exactly one succeeds. A temporary file left by a crashed writer is never
// read; it may be deleted at any time. Holds are flocks on
// dir/.holds/<id>.hold (see Hold).
//
// dir is created (0700, with missing parents) on the first Put; files are
// 0600. A missing dir is an empty store. FS is safe for concurrent use.
//
// Checkpoints' git objects (Objects) are kept beside the conversations in
// a bare git repository, <dir>/checkpoints.git, which every reader of
// conversations ignores and git itself reads. The index of the
// conversations' order and native ids is kept in <dir>/.index
// (fsindexfile.go): a cache, checked against the directory, rebuilt when
// it is missing, stale or damaged.
type FS struct {
	dir string

	objsOnce sync.Once
	objs     checkpoint.Objects
	idx      fsIndex // ListPage's and Resolve's (fsindex.go)
}

var _ ObjectStorer = (*FS)(nil)

// fileReads counts the conversation files FS has opened, for the tests
// of what a page or a resolve reads (fsindex.go).
var fileReads atomic.Int64

// objectsDir is the bare git repository of the checkpoints' objects,
// inside the store's directory.
const objectsDir = "checkpoints.git"

// Objects implements ObjectStorer: the checkpoints' objects are in the
// bare git repository <dir>/checkpoints.git (checkpoint.Dir, made when
// first written), one per FS value, safe for concurrent use. Objects are
// shared by every conversation of the store and are left in place when a
// conversation is deleted (no garbage collection yet).
func (s *FS) Objects() checkpoint.Objects {
	s.objsOnce.Do(func() {
		if s.dir == "" {
			s.objs = noObjects{errors.New("conversation: objects: store has no directory")}
			return
		}
		s.objs = countedDir{checkpoint.NewDir(filepath.Join(s.dir, objectsDir))}
	})
	return s.objs
}

// countedDir is the FS store's checkpoint.Dir with its operations counted
// (internal/storeops), as the stores count theirs: checkpoint is a leaf.
type countedDir struct{ d *checkpoint.Dir }

func (c countedDir) Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error) {
	storeops.Count("filesystem-objects", "missing")
	return c.d.Missing(ctx, hashes)
}

func (c countedDir) Read(ctx context.Context, h plumbing.Hash) (checkpoint.Object, error) {
	storeops.Count("filesystem-objects", "read")
	return c.d.Read(ctx, h)
}

func (c countedDir) Write(ctx context.Context, objs []checkpoint.Object) error {
	storeops.Count("filesystem-objects", "write")
	return c.d.Write(ctx, objs)
}

// Path is the repository's directory (checkpoint.Dir.Path).
func (c countedDir) Path() string { return c.d.Path() }

// Name implements checkpoint.Namer.
func (c countedDir) Name(ctx context.Context, ref string, h plumbing.Hash) error {
	storeops.Count("filesystem-objects", "name")
	return c.d.Name(ctx, ref, h)
}

// noObjects is the object store of a store that cannot have one: every
// method fails with err.
type noObjects struct{ err error }

func (n noObjects) Missing(context.Context, []plumbing.Hash) ([]plumbing.Hash, error) {
	return nil, n.err
}

func (n noObjects) Read(context.Context, plumbing.Hash) (checkpoint.Object, error) {
	return checkpoint.Object{}, n.err
}

func (n noObjects) Write(context.Context, []checkpoint.Object) error { return n.err }

// NewFS returns the store kept in dir (see DefaultDir). Nothing is touched
// until the first operation.
func NewFS(dir string) *FS { return &FS{dir: dir} }

// Dir returns the store's directory.
func (s *FS) Dir() string { return s.dir }

// DefaultDir returns the default store directory: $OUTPOST_HOME/conversations
// when OUTPOST_HOME is set, else $XDG_DATA_HOME/outpost/conversations when
// XDG_DATA_HOME is an absolute path, else
// ~/.local/share/outpost/conversations. The result is absolute. It fails
// only when no home directory can be found.
func DefaultDir() (string, error) {
	if h := os.Getenv("OUTPOST_HOME"); h != "" {
		abs, err := filepath.Abs(h)
		if err != nil {
			return "", fmt.Errorf("conversation: OUTPOST_HOME: %w", err)
		}
		return filepath.Join(abs, "conversations"), nil
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "outpost", "conversations"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("conversation: no default store directory: %w", err)
	}
	return filepath.Join(home, ".local", "share", "outpost", "conversations"), nil
}

func (s *FS) file(id string) string { return filepath.Join(s.dir, id+convExt) }

func (s *FS) ready(ctx context.Context, op string) error {
	storeops.Count("filesystem", op)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: %s: %w", op, err)
	}
	if s == nil || s.dir == "" {
		return fmt.Errorf("conversation: %s: store has no directory", op)
	}
	return nil
}

// Put implements Store. Besides Validate's errors it returns I/O errors as
// they come; a failed Put leaves the previous version in place. The
// revision check and the rename happen under the store's write lock
// (<dir>/.lock, flock), so Puts from any process on this machine are
// compare-and-swap; a stored conversation that is damaged can only be
// replaced with AnyRevision (or deleted).
func (s *FS) Put(ctx context.Context, m Meta, files []File) error {
	if err := s.ready(ctx, "put"); err != nil {
		return err
	}
	if err := Validate(m, files); err != nil {
		return fmt.Errorf("conversation: put: %w", err)
	}
	if m.Revision < AnyRevision {
		return fmt.Errorf("conversation: put: %w: %s: revision %d", ErrInvalid, m.ID, m.Revision)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	base := m.Revision
	var lock *lockedFile
	defer func() {
		if lock != nil {
			_ = lock.unlock(false)
		}
	}()
	if base == AnyRevision {
		// The new revision depends on the stored one: read it first.
		var err error
		if lock, err = s.writeLock(); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		cur, err := s.revision(m.ID, true)
		if err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		m.Revision = cur + 1
	} else {
		m.Revision = base + 1
	}
	tmp, err := os.CreateTemp(s.dir, ".put-"+m.ID+"-*")
	if err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	w := bufpool.Writer(tmp)
	defer bufpool.PutWriter(w)
	if err := encode(w, m, files, nil); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	if err := errors.Join(w.Flush(), tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	if lock == nil {
		if lock, err = s.writeLock(); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		cur, err := s.revision(m.ID, false)
		if err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		if _, err := checkRevision(m.ID, base, cur); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), s.file(m.ID)); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	renamed = true
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("conversation: put %s: syncing %s: %w", m.ID, s.dir, err)
	}
	return nil
}

// writeLock takes the store's write lock, waiting for it.
func (s *FS) writeLock() (*lockedFile, error) {
	return lockFile(filepath.Join(s.dir, ".lock"), true)
}

// revision returns the stored revision of id (0: none). A damaged
// conversation counts as revision 0 when damagedOK, else is an error.
func (s *FS) revision(id string, damagedOK bool) (int64, error) {
	m, _, err := readFile(s.file(id), id, false)
	switch {
	case err == nil:
		return m.Revision, nil
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case errors.Is(err, ErrInvalid) && damagedOK:
		return 0, nil
	}
	return 0, err
}

// Hold implements Store with an flock(2) on <dir>/.holds/<id>.hold,
// which also records the holder. The kernel frees the lock the moment the
// holder's process dies (even by SIGKILL): the liveness bound is zero. The
// FS store is one machine's: processes sharing it over a network
// filesystem get whatever locking that filesystem offers.
func (s *FS) Hold(ctx context.Context, id string, o Owner) (Hold, error) {
	if err := s.ready(ctx, "hold"); err != nil {
		return nil, err
	}
	if !ValidID(id) {
		return nil, fmt.Errorf("conversation: hold: %w: id %q", ErrInvalid, id)
	}
	dir := filepath.Join(s.dir, ".holds")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("conversation: hold %s: %w", id, err)
	}
	name := filepath.Join(dir, id+".hold")
	l, err := lockFile(name, false)
	if errors.Is(err, errLocked) {
		h := AwaitHolder(ctx, func() (Holder, bool) {
			var h Holder
			b, err := os.ReadFile(name)
			return h, err == nil && json.Unmarshal(b, &h) == nil && !h.Since.IsZero()
		})
		return nil, &BusyError{ID: id, Holder: h}
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: hold %s: %w", id, err)
	}
	b, _ := json.Marshal(Holder{Owner: o, Since: time.Now().UTC()})
	if err := errors.Join(l.f.Truncate(0), writeAt0(l.f, b)); err != nil {
		_ = l.unlock(true)
		return nil, fmt.Errorf("conversation: hold %s: %w", id, err)
	}
	return &fsHold{l: l}, nil
}

func writeAt0(f *os.File, b []byte) error {
	_, err := f.WriteAt(b, 0)
	return err
}

type fsHold struct {
	mu sync.Mutex
	l  *lockedFile
}

// Release implements Hold: it removes the hold file, then unlocks it.
func (h *fsHold) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l == nil {
		return nil
	}
	err := h.l.unlock(true)
	h.l = nil
	return err
}

// Get implements Store.
func (s *FS) Get(ctx context.Context, id string) (Meta, []File, error) {
	return s.read(ctx, "get", id, true)
}

// Meta implements Store. It reads and checks only meta.json: damage to the
// files is detected by Get and Check.
func (s *FS) Meta(ctx context.Context, id string) (Meta, error) {
	m, _, err := s.read(ctx, "meta", id, false)
	return m, err
}

func (s *FS) read(ctx context.Context, op, id string, files bool) (Meta, []File, error) {
	if err := s.ready(ctx, op); err != nil {
		return Meta{}, nil, err
	}
	if !ValidID(id) {
		return Meta{}, nil, fmt.Errorf("conversation: %s: %w: %q", op, ErrNotFound, id)
	}
	return readFile(s.file(id), id, files)
}

// readFile decodes one stored conversation, whose name gives id.
func readFile(name, id string, files bool) (Meta, []File, error) {
	fileReads.Add(1)
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Meta{}, nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Meta{}, nil, fmt.Errorf("conversation: %s: %w", id, err)
	}
	defer f.Close()
	br := bufpool.Reader(f)
	defer bufpool.PutReader(br)
	m, fl, err := decode(br, defaultLimits, files)
	if err != nil {
		return Meta{}, nil, fmt.Errorf("conversation: %s: %w", name, err)
	}
	if m.ID != id {
		return Meta{}, nil, fmt.Errorf("conversation: %s: %w: holds conversation %q", name, ErrInvalid, m.ID)
	}
	return m, fl, nil
}

// List implements Store: conversations whose file cannot be read are
// skipped (Check reports them). It fails only when dir cannot be read or
// ctx is done.
func (s *FS) List(ctx context.Context) ([]Meta, error) {
	ids, err := s.ids(ctx, "list")
	if err != nil {
		return nil, err
	}
	out := make([]Meta, 0, len(ids))
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("conversation: list: %w", err)
		}
		m, _, err := readFile(s.file(id), id, false)
		if err != nil {
			continue // damaged or deleted meanwhile
		}
		out = append(out, m)
	}
	sortMetas(out)
	return out, nil
}

// ids returns the ids of the conversation files in dir, in no order.
// readDir is os.ReadDir without the sort by name, which a directory of
// many conversations pays for nothing.
func readDir(dir string) ([]fs.DirEntry, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

func (s *FS) ids(ctx context.Context, op string) ([]string, error) {
	if err := s.ready(ctx, op); err != nil {
		return nil, err
	}
	ents, err := readDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: %s: %w", op, err)
	}
	var ids []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), convExt)
		if ok && e.Type().IsRegular() && ValidID(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Delete implements Store.
func (s *FS) Delete(ctx context.Context, id string) error {
	if err := s.ready(ctx, "delete"); err != nil {
		return err
	}
	if !ValidID(id) {
		return fmt.Errorf("conversation: delete: %w: %q", ErrNotFound, id)
	}
	lock, err := s.writeLock()
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("conversation: delete: %w: %s", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("conversation: delete %s: %w", id, err)
	}
	defer lock.unlock(false)
	err = os.Remove(s.file(id))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("conversation: delete: %w: %s", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("conversation: delete %s: %w", id, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("conversation: delete %s: syncing %s: %w", id, s.dir, err)
	}
	return nil
}

// Resolve returns the id of the one conversation ref names; see the
// package function Resolve for the rules. An exact id resolves from the
// file name alone, even when that file is damaged (Get then reports it).
func (s *FS) Resolve(ctx context.Context, ref string) (string, error) {
	if ValidID(ref) {
		// An id names its file: no need to read the directory.
		if err := s.ready(ctx, "resolve-id"); err != nil {
			return "", err
		}
		if fi, err := os.Lstat(s.file(ref)); err == nil && fi.Mode().IsRegular() {
			return ref, nil
		}
	}
	// A native id from the index, before any directory read: no file is
	// read again unless it changed since (fsindex.go), and no Meta is
	// made per stored conversation.
	ents, err := s.index(ctx, "resolve-native")
	if err != nil {
		return "", err
	}
	var natives []string
	for _, e := range ents {
		if e.native == ref {
			natives = append(natives, e.key.ID)
		}
	}
	if id, ok, err := Pick(ref, "native id", natives); ok {
		return id, err
	}
	// An id prefix: the file names, damaged conversations' too.
	ids, err := s.ids(ctx, "resolve")
	if err != nil {
		return "", err
	}
	return resolve(ref, ids, func() ([]Meta, error) { return nil, nil })
}

// Damage is a stored conversation FS.Check could not read.
type Damage struct {
	ID   string // the id its file name gives
	Path string // the file
	Err  error  // why, wrapping ErrInvalid for damage
}

// Check reads every stored conversation completely, verifying sizes and
// digests, and returns the ones that are damaged (truncated, corrupt,
// unsupported version, or holding another id), sorted by id.
// Damaged conversations are invisible to List; Get reports them with
// ErrInvalid; Delete removes them. Check fails only when dir cannot be read
// or ctx is done.
func (s *FS) Check(ctx context.Context) ([]Damage, error) {
	ids, err := s.ids(ctx, "check")
	if err != nil {
		return nil, err
	}
	var out []Damage
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("conversation: check: %w", err)
		}
		name := s.file(id)
		if _, _, err := readFile(name, id, true); err != nil && !errors.Is(err, ErrNotFound) {
			out = append(out, Damage{ID: id, Path: name, Err: err})
		}
	}
	sortDamage(out)
	return out, nil
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be fsync'd there; renames are durable
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
