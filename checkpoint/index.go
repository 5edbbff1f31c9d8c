package checkpoint

import (
	"crypto/sha256"
	"encoding/gob"
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
const indexVersion = 1

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

func loadIndex(file, dir string) *index {
	idx := &index{}
	if file == "" {
		return idx
	}
	f, err := os.Open(file)
	if err != nil {
		return idx
	}
	defer f.Close()
	var x indexFile
	if gob.NewDecoder(f).Decode(&x) != nil || x.Version != indexVersion || x.Dir != absDir(dir) {
		return idx
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
func saveIndex(file, dir string, started time.Time, es []entry) {
	x := indexFile{Version: indexVersion, Dir: absDir(dir), Started: started.UnixNano(), Entries: make(map[string]indexEntry, len(es))}
	for _, e := range es {
		x.Entries[e.rel] = indexEntry{Stat: e.st, Hash: e.hash, Size: e.size}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".idx-*")
	if err != nil {
		return
	}
	if gob.NewEncoder(tmp).Encode(&x) != nil || tmp.Close() != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return
	}
	if os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
	}
}

func absDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	return abs
}
