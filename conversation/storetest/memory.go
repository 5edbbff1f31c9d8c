package storetest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
)

// Memory is a conversation.Store in memory, for tests of code that uses
// a Store. It passes the suite like conversation.FS: it validates, copies and orders
// as FS does, but forgets everything when dropped and is shared by
// goroutines only, not processes. The zero value is not usable; call
// NewMemory.
type Memory struct {
	mu    sync.RWMutex
	convs map[string]memConv
	holds map[string]*memHold
	objs  *checkpoint.Memory
}

var (
	_ conversation.Store        = (*Memory)(nil)
	_ conversation.ObjectStorer = (*Memory)(nil)
)

// Objects implements conversation.ObjectStorer: the checkpoints' objects,
// in memory (checkpoint.Memory), one store per Memory. Delete leaves them
// in place, as every store does.
func (s *Memory) Objects() checkpoint.Objects { return s.objs }

type memHold struct {
	s      *Memory
	id     string
	holder conversation.Holder
}

// Release implements conversation.Hold.
func (h *memHold) Release() error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.holds[h.id] == h {
		delete(h.s.holds, h.id)
	}
	return nil
}

// Hold implements conversation.Store: holds live as long as the Memory,
// in this process only.
func (s *Memory) Hold(ctx context.Context, id string, o conversation.Owner) (conversation.Hold, error) {
	if err := s.ready(ctx, "hold"); err != nil {
		return nil, err
	}
	if !conversation.ValidID(id) {
		return nil, fmt.Errorf("conversation: hold: %w: id %q", conversation.ErrInvalid, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holds[id]; ok {
		return nil, &conversation.BusyError{ID: id, Holder: h.holder}
	}
	h := &memHold{s: s, id: id, holder: conversation.Holder{Owner: o, Since: time.Now().UTC()}}
	s.holds[id] = h
	return h, nil
}

type memConv struct {
	meta  conversation.Meta
	files []conversation.File
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{convs: make(map[string]memConv), holds: make(map[string]*memHold), objs: checkpoint.NewMemory()}
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

// Put implements conversation.Store.
func (s *Memory) Put(ctx context.Context, m conversation.Meta, files []conversation.File) error {
	if err := s.ready(ctx, "put"); err != nil {
		return err
	}
	if err := conversation.Validate(m, files); err != nil {
		return fmt.Errorf("conversation: put: %w", err)
	}
	c := memConv{meta: cloneMeta(m), files: cloneFiles(files)}
	c.meta.Files = make([]string, len(files))
	for i, f := range files {
		c.meta.Files[i] = f.Path
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	current := s.convs[m.ID].meta.Revision
	if m.Revision != conversation.AnyRevision && m.Revision != current {
		return &conversation.StaleError{ID: m.ID, Base: m.Revision, Current: current}
	}
	c.meta.Revision = current + 1
	s.convs[m.ID] = c
	return nil
}

// Get implements conversation.Store.
func (s *Memory) Get(ctx context.Context, id string) (conversation.Meta, []conversation.File, error) {
	if err := s.ready(ctx, "get"); err != nil {
		return conversation.Meta{}, nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if !ok {
		return conversation.Meta{}, nil, fmt.Errorf("conversation: get: %w: %q", conversation.ErrNotFound, id)
	}
	return cloneMeta(c.meta), cloneFiles(c.files), nil
}

// Meta implements conversation.Store.
func (s *Memory) Meta(ctx context.Context, id string) (conversation.Meta, error) {
	if err := s.ready(ctx, "meta"); err != nil {
		return conversation.Meta{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if !ok {
		return conversation.Meta{}, fmt.Errorf("conversation: meta: %w: %q", conversation.ErrNotFound, id)
	}
	return cloneMeta(c.meta), nil
}

// List implements conversation.Store.
func (s *Memory) List(ctx context.Context) ([]conversation.Meta, error) {
	if err := s.ready(ctx, "list"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	out := make([]conversation.Meta, 0, len(s.convs))
	for _, c := range s.convs {
		out = append(out, cloneMeta(c.meta))
	}
	s.mu.RUnlock()
	sortMetas(out)
	return out, nil
}

// Delete implements conversation.Store.
func (s *Memory) Delete(ctx context.Context, id string) error {
	if err := s.ready(ctx, "delete"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[id]; !ok {
		return fmt.Errorf("conversation: delete: %w: %q", conversation.ErrNotFound, id)
	}
	delete(s.convs, id)
	return nil
}

func cloneMeta(m conversation.Meta) conversation.Meta {
	m.Files = slices.Clone(m.Files)
	m.Checkpoints = slices.Clone(m.Checkpoints)
	if m.Metered != nil {
		c := *m.Metered
		c.ByModel = maps.Clone(c.ByModel)
		m.Metered = &c
	}
	return m
}

func cloneFiles(files []conversation.File) []conversation.File {
	out := make([]conversation.File, len(files))
	for i, f := range files {
		out[i] = conversation.File{Path: f.Path, Mode: f.Mode, Data: slices.Clone(f.Data)}
	}
	return out
}

// sortMetas orders as conversation.FS lists: most recently updated first.
func sortMetas(ms []conversation.Meta) {
	slices.SortStableFunc(ms, func(a, b conversation.Meta) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
}
