package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// The stat cache: what Snapshot learnt of each file of a workspace (its
// size, times, inode and mode, and the blob it made), so the next
// snapshot of the same directory reads only the files that changed, as
// git's index does. It is a cache: a missing, damaged or foreign file is
// ignored and every file is read.

// racyWindow: a file modified this close to (or after) the start of the
// snapshot that recorded it is read again next time, since a change in
// the same clock tick would not change its stat ("racy git").
const racyWindow = 2 * time.Second

// indexVersion changes when the cache's layout does.
const indexVersion = 2

// stat is what the cache compares.
type stat struct {
	Size  int64
	Mtime int64 // Unix nanoseconds
	Ctime int64
	Ino   uint64
	Mode  uint32
}

func statOf(fi fs.FileInfo) stat {
	s := stat{Size: fi.Size(), Mtime: fi.ModTime().UnixNano(), Mode: uint32(fi.Mode())}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.Ino = st.Ino
		s.Ctime = st.Ctim.Sec*1e9 + st.Ctim.Nsec
	}
	return s
}

type indexEntry struct {
	Stat stat
	Hash plumbing.Hash
	Size int64 // the blob's size (masked content)
}

// indexFile is the cache's file.
type indexFile struct {
	Version int
	Dir     string
	Started int64 // Unix nanoseconds: when the snapshot that wrote it began
	// Tree is the tree its entries make. The cache is used only with a
	// store that holds it: objects are written blobs first and never
	// removed, so such a store holds every blob the cache names (a cache
	// made for another store, or one whose objects were lost, is not).
	Tree    plumbing.Hash
	Entries map[string]indexEntry
}

// index is a loaded cache (never nil; empty when there is none).
type index struct {
	f       indexFile
	written counted // objects the snapshot wrote (not cached)
}

// IndexPath is where the stat cache of the workspace dir lives by default:
// in the user's cache directory, named by a hash of dir's absolute path.
// Empty when there is no cache directory.
func IndexPath(dir string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(base, "outpost", "checkpoints", hex.EncodeToString(sum[:12])+".idx")
}

func loadIndex(ctx context.Context, objs Objects, file, dir string) *index {
	idx := &index{}
	if file == "" {
		return idx
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return idx
	}
	x, ok := decodeIndex(b)
	if !ok || x.Dir != absDir(dir) || x.Tree.IsZero() {
		return idx
	}
	if miss, err := objs.Missing(ctx, []plumbing.Hash{x.Tree}); err != nil || len(miss) > 0 {
		return idx // made for another store
	}
	idx.f = x
	return idx
}

// lookup returns the blob of a file the cache knows in this very state.
func (x *index) lookup(rel string, st stat) (plumbing.Hash, int64, bool) {
	e, ok := x.f.Entries[rel]
	if !ok || e.Stat != st || st.Mtime >= x.f.Started-int64(racyWindow) {
		return plumbing.ZeroHash, 0, false
	}
	return e.Hash, e.Size, true
}

// saveIndex writes the cache atomically; failing costs only speed.
func saveIndex(file, dir string, started time.Time, tree plumbing.Hash, es []entry) {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".idx-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(encodeIndex(absDir(dir), started.UnixNano(), tree, es))
	if cerr := tmp.Close(); err != nil || cerr != nil {
		os.Remove(tmp.Name())
		return
	}
	if os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
	}
}

// indexMagic starts the cache's file, with indexVersion after it.
const indexMagic = "OPIX"

// encodeIndex lays the cache out flat: the header (magic, version,
// started, the directory), then per entry its path, stat, blob and size.
func encodeIndex(dir string, started int64, tree plumbing.Hash, es []entry) []byte {
	b := make([]byte, 0, 64+len(dir)+len(es)*(80+32))
	b = append(b, indexMagic...)
	b = binary.LittleEndian.AppendUint32(b, indexVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(started))
	b = appendString(b, dir)
	b = append(b, tree[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(es)))
	for _, e := range es {
		b = appendString(b, e.rel)
		for _, v := range []uint64{uint64(e.st.Size), uint64(e.st.Mtime), uint64(e.st.Ctime), e.st.Ino, uint64(e.st.Mode), uint64(e.size)} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		b = append(b, e.hash[:]...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// decodeIndex reads what encodeIndex wrote; false for anything else.
func decodeIndex(b []byte) (indexFile, bool) {
	r := reader{b: b}
	if string(r.bytes(len(indexMagic))) != indexMagic || r.u32() != indexVersion {
		return indexFile{}, false
	}
	x := indexFile{Version: indexVersion, Started: int64(r.u64()), Dir: r.str()}
	copy(x.Tree[:], r.bytes(len(x.Tree)))
	n := int(r.u32())
	if r.bad || n > len(b)/80 {
		return indexFile{}, false
	}
	x.Entries = make(map[string]indexEntry, n)
	for range n {
		rel := r.str()
		var e indexEntry
		e.Stat = stat{Size: int64(r.u64()), Mtime: int64(r.u64()), Ctime: int64(r.u64()), Ino: r.u64(), Mode: uint32(r.u64())}
		e.Size = int64(r.u64())
		copy(e.Hash[:], r.bytes(len(e.Hash)))
		if r.bad {
			return indexFile{}, false
		}
		x.Entries[rel] = e
	}
	return x, !r.bad
}

// reader reads the cache's fields; bad once it ran past the end.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str() string { return string(r.bytes(int(r.u32()))) }

func absDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	return abs
}
