package conversation

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"
)

// The FS index on disk: what an FS value's index (fsindex.go) knew at its
// last scan, kept in <dir>/.index/conversations so that a new process
// (a server's start) pages through the store without reading every
// conversation file. It is a cache, never trusted blindly:
//
//   - the file ends with a CRC-32C of the rest, and a file that is
//     truncated, damaged, of another version or of another directory (the
//     device and inode it was written for) is ignored: the index is
//     rebuilt from the conversations and written again;
//   - each entry holds the modification time and size its file had when
//     read; the index's own scan (a directory read and a stat a file)
//     reads a file again when they changed, as it does in memory;
//   - the directory's time at the scan is kept too, and used as in memory:
//     when the directory still has that time, and the scan began a second
//     or more after it, nothing was created, renamed over or removed since
//     (every Put and Delete is one of those, from any process), and the
//     entries are used with no scan at all.
//
// Entries whose file changed within a second of the scan are left out of
// the file (a change in the same tick of the file system's clock would
// not move the time): the next process reads those again.
//
// The file is written whole (a temporary file in .index, renamed over
// it) after a scan that changed the index, or that made it vouched for by
// the directory's time. It is in a directory of its own so that writing
// it does not move the time of the conversations' directory. Processes
// sharing the store write it in turn; each version is a consistent
// snapshot, checked as above by whoever reads it. It is not fsynced: a
// version lost in a crash is a damaged or older one.

// indexFile is where the index is kept, under the store's directory.
const indexFile = ".index/conversations"

// indexMagic begins the file; its last digit is the format's version.
const indexMagic = "outpost-fs-index 1\n"

var indexCRC = crc32.MakeTable(crc32.Castagnoli)

// indexFileState is what an index file holds besides its entries: the
// directory it indexes (fileIdentity) and its time at the scan, and when
// the scan began.
type indexFileState struct {
	dirID           [2]uint64
	dirMod, scanned time.Time
}

// vouches says whether the directory's time dirMod vouches for entries
// scanned at st.scanned: unchanged since, and not within the same tick.
func (st indexFileState) vouches(dirMod time.Time) bool {
	return !st.scanned.IsZero() && dirMod.Equal(st.dirMod) && st.scanned.Sub(st.dirMod) >= racyWindow
}

// indexLoads counts the index files read and found good, for the tests.
var indexLoads atomic.Int64

// loadIndex reads the index file of the directory di describes into
// s.idx (entries, in the order of pages); s.idx.mu is held. A missing or
// bad file leaves s.idx as it was.
func (s *FS) loadIndex(di fs.FileInfo) {
	b, err := os.ReadFile(filepath.Join(s.dir, indexFile))
	if err != nil {
		return
	}
	st, ents, ok := decodeIndex(b)
	if !ok || st.dirID != fileIdentity(di) {
		return
	}
	indexLoads.Add(1)
	// m is made from sorted by the next scan, if one is needed.
	s.idx.sorted, s.idx.dirMod, s.idx.scanned = ents, st.dirMod, st.scanned
	s.idx.saved = st
}

// saveIndex writes the index's entries (in the order of pages) to the
// index file, leaving out those too recent to trust; s.idx.mu is held.
// A failure is left for the next scan: the file is a cache.
func (s *FS) saveIndex(st indexFileState, ents []fsEntry) {
	racy := st.scanned.Add(-racyWindow).UnixNano()
	keep := make([]fsEntry, 0, len(ents))
	for _, e := range ents {
		if e.mod < racy {
			keep = append(keep, e)
		}
	}
	if len(keep) != len(ents) {
		st.dirMod, st.scanned = time.Time{}, time.Time{} // incomplete: a scan must follow
	}
	dir := filepath.Join(s.dir, filepath.Dir(indexFile))
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// Making .index moves the directory's time: this scan's no
		// longer vouches. The next scan's will (once per store).
		if err := os.Mkdir(dir, 0o700); err != nil {
			return
		}
		st.dirMod, st.scanned = time.Time{}, time.Time{}
	}
	tmp, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(encodeIndex(st, keep))
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.dir, indexFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	s.idx.saved, s.idx.dirty = st, false
}

// encodeIndex is the index file's content: the magic, the state, the
// entries' count and the entries (varints and length-prefixed strings),
// then the CRC-32C of all that.
func encodeIndex(st indexFileState, ents []fsEntry) []byte {
	b := make([]byte, 0, 64+len(ents)*96)
	b = append(b, indexMagic...)
	b = binary.AppendUvarint(b, st.dirID[0])
	b = binary.AppendUvarint(b, st.dirID[1])
	b = appendTime(b, st.dirMod)
	b = appendTime(b, st.scanned)
	b = binary.AppendUvarint(b, uint64(len(ents)))
	for _, e := range ents {
		b = appendString(b, e.key.ID)
		b = binary.AppendVarint(b, e.mod)
		b = binary.AppendVarint(b, e.size)
		b = binary.AppendVarint(b, e.key.Updated)
		b = binary.AppendVarint(b, e.key.Created)
		b = appendString(b, e.owner)
		b = appendString(b, e.native)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, indexCRC))
}

// appendTime appends t as Unix nanoseconds, 0 for the zero time.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeIndex reads what encodeIndex wrote; ok is false for anything else.
func decodeIndex(b []byte) (st indexFileState, ents []fsEntry, ok bool) {
	if len(b) < len(indexMagic)+4 || string(b[:len(indexMagic)]) != indexMagic {
		return st, nil, false
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, indexCRC) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return st, nil, false
	}
	// The strings share b, which is never written again.
	r := indexReader{b: body, s: unsafe.String(unsafe.SliceData(body), len(body)), at: len(indexMagic)}
	st.dirID = [2]uint64{r.uvarint(), r.uvarint()}
	st.dirMod, st.scanned = r.time(), r.time()
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)-r.at) { // an entry takes more than a byte
		return st, nil, false
	}
	ents = make([]fsEntry, 0, n)
	for range n {
		var e fsEntry
		e.key.ID, e.mod, e.size = r.string(), r.varint(), r.varint()
		e.key.Updated, e.key.Created = r.varint(), r.varint()
		e.owner, e.native = r.string(), r.string()
		if r.bad || !ValidID(e.key.ID) {
			return st, nil, false
		}
		ents = append(ents, e)
	}
	return st, ents, !r.bad && r.at == len(r.b)
}

// indexReader reads an index file's fields from b[at:]; s is b as a
// string, which the strings read share (no allocation for them).
// bad is set at the first field that is not there.
type indexReader struct {
	b   []byte
	s   string
	at  int
	bad bool
}

func (r *indexReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b[r.at:])
	if n <= 0 {
		r.bad, r.at = true, len(r.b)
		return 0
	}
	r.at += n
	return v
}

func (r *indexReader) varint() int64 {
	v, n := binary.Varint(r.b[r.at:])
	if n <= 0 {
		r.bad, r.at = true, len(r.b)
		return 0
	}
	r.at += n
	return v
}

func (r *indexReader) time() time.Time {
	if ns := r.varint(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (r *indexReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.at) {
		r.bad, r.at = true, len(r.b)
		return ""
	}
	v := r.s[r.at : r.at+int(n)]
	r.at += int(n)
	return v
}
