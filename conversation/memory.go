package conversation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is a Store in memory, for tests of code that uses a Store. It
// passes storetest's suite like FS: it validates, copies and orders
// as FS does, but forgets everything when dropped and is shared by
// goroutines only, not processes. The zero value is not usable; call
// NewMemory.
type Memory struct {
	mu    sync.RWMutex
	convs map[string]memConv
	holds map[string]*memHold
}

type memHold struct {
	s      *Memory
	id     string
	holder Holder
}

// Release implements Hold.
func (h *memHold) Release() error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.holds[h.id] == h {
		delete(h.s.holds, h.id)
	}
	return nil
}

// Hold implements Store: holds live as long as the Memory, in this
// process only.
func (s *Memory) Hold(ctx context.Context, id string, o Owner) (Hold, error) {
	if err := s.ready(ctx, "hold"); err != nil {
		return nil, err
	}
	if !ValidID(id) {
		return nil, fmt.Errorf("conversation: hold: %w: id %q", ErrInvalid, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holds[id]; ok {
		return nil, &BusyError{ID: id, Holder: h.holder}
	}
	h := &memHold{s: s, id: id, holder: Holder{Owner: o, Since: time.Now().UTC()}}
	s.holds[id] = h
	return h, nil
}

type memConv struct {
	meta  Meta
	files []File
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{convs: make(map[string]memConv), holds: make(map[string]*memHold)}
}

func (s *Memory) ready(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: %s: %w", op, err)
	}
	if s == nil || s.convs == nil {
		return fmt.Errorf("conversation: %s: Memory not made with NewMemory", op)
	}
	return nil
}

// Put implements Store.
func (s *Memory) Put(ctx context.Context, m Meta, files []File) error {
	if err := s.ready(ctx, "put"); err != nil {
		return err
	}
	if err := Validate(m, files); err != nil {
		return fmt.Errorf("conversation: put: %w", err)
	}
	c := memConv{meta: cloneMeta(m), files: cloneFiles(files)}
	c.meta.Files = make([]string, len(files))
	for i, f := range files {
		c.meta.Files[i] = f.Path
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, err := checkRevision(m.ID, m.Revision, s.convs[m.ID].meta.Revision)
	if err != nil {
		return err
	}
	c.meta.Revision = rev
	s.convs[m.ID] = c
	return nil
}

// Get implements Store.
func (s *Memory) Get(ctx context.Context, id string) (Meta, []File, error) {
	if err := s.ready(ctx, "get"); err != nil {
		return Meta{}, nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if !ok {
		return Meta{}, nil, fmt.Errorf("conversation: get: %w: %q", ErrNotFound, id)
	}
	return cloneMeta(c.meta), cloneFiles(c.files), nil
}

// Meta implements Store.
func (s *Memory) Meta(ctx context.Context, id string) (Meta, error) {
	if err := s.ready(ctx, "meta"); err != nil {
		return Meta{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if !ok {
		return Meta{}, fmt.Errorf("conversation: meta: %w: %q", ErrNotFound, id)
	}
	return cloneMeta(c.meta), nil
}

// List implements Store.
func (s *Memory) List(ctx context.Context) ([]Meta, error) {
	if err := s.ready(ctx, "list"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	out := make([]Meta, 0, len(s.convs))
	for _, c := range s.convs {
		out = append(out, cloneMeta(c.meta))
	}
	s.mu.RUnlock()
	sortMetas(out)
	return out, nil
}

// Delete implements Store.
func (s *Memory) Delete(ctx context.Context, id string) error {
	if err := s.ready(ctx, "delete"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[id]; !ok {
		return fmt.Errorf("conversation: delete: %w: %q", ErrNotFound, id)
	}
	delete(s.convs, id)
	return nil
}

func cloneMeta(m Meta) Meta {
	m.Files = slices.Clone(m.Files)
	return m
}

func cloneFiles(files []File) []File {
	out := make([]File, len(files))
	for i, f := range files {
		out[i] = File{Path: f.Path, Mode: f.Mode, Data: slices.Clone(f.Data)}
	}
	return out
}
