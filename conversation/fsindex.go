package conversation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fsIndex is what an FS value remembers of each stored conversation to
// page through them and resolve native ids without reading every file:
// the page key, owner and native id, with the file's modification time
// and size they were read at. A file is read again only when its time or
// size changed (Put replaces the file, Delete removes it, from any
// process): a page costs a directory read and a stat per conversation,
// and the reads of the page's own files. About 100 bytes a conversation.
type fsIndex struct {
	mu sync.Mutex
	m  map[string]fsEntry
	// sorted are m's entries in the order of pages (newest first) as of
	// the last scan, which began at scanned with the directory modified
	// at dirMod: while the directory's time stays dirMod nothing was
	// created, renamed over or removed in it (every Put and Delete is
	// one of those), and its entries are used without a scan once the
	// scan began a second or more after dirMod (a change within the same
	// tick of the file system's clock would not move it).
	sorted          []fsEntry
	dirMod, scanned time.Time
	// saved is what the index file holds as far as this value knows
	// (fsindexfile.go), and dirty says that m changed since it wrote or
	// read it.
	saved         indexFileState
	dirty, loaded bool
}

// racyWindow is how long after the directory's last change a scan must
// begin for its time to vouch for the scan.
const racyWindow = time.Second

// dirScans counts the scans of a store's directory, for the tests.
var dirScans atomic.Int64

type fsEntry struct {
	mod           int64 // Unix nanoseconds
	size          int64
	key           PageKey
	owner, native string
}

// index brings the index up to the directory and returns its entries
// (id in key.ID) newest first; the slice is shared: read only.
// Unreadable conversations are left out, as List leaves them out.
func (s *FS) index(ctx context.Context, op string) ([]fsEntry, error) {
	if err := s.ready(ctx, op); err != nil {
		return nil, err
	}
	start := time.Now()
	di, err := os.Stat(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: %s: %w", op, err)
	}
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if !s.idx.loaded {
		s.idx.loaded = true
		s.loadIndex(di)
	}
	now := indexFileState{dirID: fileIdentity(di), dirMod: s.idx.dirMod, scanned: s.idx.scanned}
	if now.vouches(di.ModTime()) {
		return s.idx.sorted, nil
	}
	ents, err := s.scan(ctx, op)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b fsEntry) int { return b.key.Compare(a.key) })
	s.idx.sorted, s.idx.dirMod, s.idx.scanned = ents, di.ModTime(), start
	now.dirMod, now.scanned = di.ModTime(), start
	if s.idx.dirty || (now.vouches(now.dirMod) && !s.idx.saved.vouches(now.dirMod)) {
		s.saveIndex(now, ents)
	}
	return ents, nil
}

// scan reads the directory and the files that changed since the index
// last saw them; s.idx.mu is held.
func (s *FS) scan(ctx context.Context, op string) ([]fsEntry, error) {
	dirScans.Add(1)
	ents, err := readDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: %s: %w", op, err)
	}
	if s.idx.m == nil { // the entries of the index file, if any
		s.idx.m = make(map[string]fsEntry, len(s.idx.sorted))
		for _, e := range s.idx.sorted {
			s.idx.m[e.key.ID] = e
		}
	}
	seen := make(map[string]bool, len(ents))
	out := make([]fsEntry, 0, len(ents))
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), convExt)
		if !ok || !e.Type().IsRegular() || !ValidID(id) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("conversation: %s: %w", op, err)
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted meanwhile
		}
		seen[id] = true
		c, ok := s.idx.m[id]
		if !ok || c.mod != fi.ModTime().UnixNano() || c.size != fi.Size() {
			m, _, err := readFile(s.file(id), id, false)
			if err != nil {
				if ok {
					delete(s.idx.m, id)
					s.idx.dirty = true
				}
				continue // damaged or deleted meanwhile
			}
			c = fsEntry{mod: fi.ModTime().UnixNano(), size: fi.Size(), key: KeyOf(m), owner: m.Owner, native: m.Native}
			s.idx.m[id], s.idx.dirty = c, true
		}
		out = append(out, c)
	}
	for id := range s.idx.m {
		if !seen[id] {
			delete(s.idx.m, id)
			s.idx.dirty = true
		}
	}
	return out, nil
}

var _ Pager = (*FS)(nil)

// ListPage implements Pager: the index orders the conversations, and only
// the page's files are read.
func (s *FS) ListPage(ctx context.Context, q PageQuery) ([]Meta, string, error) {
	after, err := q.AfterKey()
	if err != nil {
		return nil, "", err
	}
	ents, err := s.index(ctx, "list-page")
	if err != nil {
		return nil, "", err
	}
	i := 0
	if after != nil { // the first entry older than the cursor
		i, _ = slices.BinarySearchFunc(ents, *after, func(e fsEntry, k PageKey) int { return k.Compare(e.key) })
		for i < len(ents) && ents[i].key.Compare(*after) >= 0 {
			i++
		}
	}
	page := make([]Meta, 0, min(q.Limit, len(ents)-i))
	last := -1
	for ; i < len(ents); i++ {
		e := ents[i]
		if q.Owner != nil && e.owner != *q.Owner {
			continue
		}
		if len(page) == q.Limit {
			return page, ents[last].key.Cursor(), nil
		}
		m, _, err := readFile(s.file(e.key.ID), e.key.ID, false)
		if err != nil {
			continue // deleted or damaged since the index was read
		}
		page, last = append(page, m), i
	}
	return page, "", nil
}
