package turnstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is the in-process Store: for tests, and for several servers
// of one process sharing their turns.
type Memory struct {
	mu        sync.Mutex
	beats     map[string]time.Time
	turns     map[string]*memTurn
	commands  map[string][]Command // by owner
	listeners map[*memListener]struct{}
}

type memTurn struct {
	rec    Turn
	events []Event
	bytes  int64
}

type memListener struct {
	replica  string
	changed  func(string)
	commands func()
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory {
	return &Memory{beats: map[string]time.Time{}, turns: map[string]*memTurn{}, commands: map[string][]Command{}, listeners: map[*memListener]struct{}{}}
}

var _ Store = (*Memory)(nil)

// Beat implements Store.
func (m *Memory) Beat(ctx context.Context, replica string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.beats[replica] = time.Now()
	return ctx.Err()
}

// Leave implements Store.
func (m *Memory) Leave(ctx context.Context, replica string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.beats, replica)
	return ctx.Err()
}

// Create implements Store.
func (m *Memory) Create(ctx context.Context, t Turn) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.First, t.Last, t.Dropped, t.Result = 1, 0, 0, nil
	m.turns[t.ID] = &memTurn{rec: t}
	m.changed(t.ID)
	return ctx.Err()
}

// Start implements Store.
func (m *Memory) Start(ctx context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.turns[id]; t != nil && t.rec.State == StateQueued {
		t.rec.State, t.rec.Started = StateRunning, at
		m.changed(id)
	}
	return ctx.Err()
}

// Append implements Store.
func (m *Memory) Append(ctx context.Context, id string, evs []Event, maxBytes int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[id]
	if t == nil || t.rec.State == StateFinished {
		return ctx.Err()
	}
	for _, e := range evs {
		if e.Seq <= t.rec.Last {
			continue
		}
		t.add(e)
	}
	for t.bytes > maxBytes && len(t.events) > 1 {
		n := int64(len(t.events[0].Data))
		t.bytes -= n
		t.rec.Dropped += n
		t.events = slices.Delete(t.events, 0, 1)
		t.rec.First = t.events[0].Seq
	}
	m.changed(id)
	return ctx.Err()
}

func (t *memTurn) add(e Event) {
	t.events = append(t.events, Event{Seq: e.Seq, Data: slices.Clone(e.Data)})
	t.bytes += int64(len(e.Data))
	t.rec.Last = e.Seq
}

// Finish implements Store.
func (m *Memory) Finish(ctx context.Context, id string, result Event, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[id]
	if t == nil {
		return false, ErrNotFound
	}
	if t.rec.State == StateFinished {
		return false, ctx.Err()
	}
	m.finish(t, result, at)
	return true, ctx.Err()
}

func (m *Memory) finish(t *memTurn, result Event, at time.Time) {
	t.add(result)
	t.rec.State, t.rec.Finished, t.rec.Result = StateFinished, at, slices.Clone(result.Data)
	m.changed(t.rec.ID)
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, id string) (Turn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[id]
	if t == nil {
		return Turn{}, ErrNotFound
	}
	return t.rec, ctx.Err()
}

// Replay implements Store.
func (m *Memory) Replay(ctx context.Context, id string, after int64, limit int) (Turn, []Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[id]
	if t == nil {
		return Turn{}, nil, ErrNotFound
	}
	var out []Event
	for _, e := range t.events {
		if e.Seq > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return t.rec, out, ctx.Err()
}

// Send implements Store.
func (m *Memory) Send(ctx context.Context, c Command) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[c.Turn]
	switch {
	case t == nil:
		return ErrNotFound
	case t.rec.State == StateFinished:
		return ErrFinished
	}
	m.commands[t.rec.Owner] = append(m.commands[t.rec.Owner], c)
	for l := range m.listeners {
		if l.replica == t.rec.Owner {
			go l.commands()
		}
	}
	return ctx.Err()
}

// Take implements Store.
func (m *Memory) Take(ctx context.Context, replica string) ([]Command, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.commands[replica]
	delete(m.commands, replica)
	return out, ctx.Err()
}

// Reap implements Store.
func (m *Memory) Reap(ctx context.Context, silent time.Duration, result func(Turn) []byte) ([]string, error) {
	now := time.Now()
	return m.end(ctx, result, func(t Turn) bool {
		beat, ok := m.beats[t.Owner]
		return !ok || now.Sub(beat) >= silent
	})
}

// Abandon implements Store.
func (m *Memory) Abandon(ctx context.Context, replica string, result func(Turn) []byte) ([]string, error) {
	return m.end(ctx, result, func(t Turn) bool { return t.Owner == replica })
}

// end finishes the unfinished turns lost says are lost.
func (m *Memory) end(ctx context.Context, result func(Turn) []byte, lost func(Turn) bool) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	now := time.Now()
	for id, t := range m.turns {
		if t.rec.State == StateFinished || !lost(t.rec) {
			continue
		}
		m.finish(t, Event{Seq: t.rec.Last + 1, Data: result(t.rec)}, now.UTC())
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, ctx.Err()
}

// Expire implements Store.
func (m *Memory) Expire(ctx context.Context, before time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id, t := range m.turns {
		if t.rec.State == StateFinished && t.rec.Finished.Before(before) {
			delete(m.turns, id)
			n++
		}
	}
	for owner, cs := range m.commands {
		m.commands[owner] = slices.DeleteFunc(cs, func(c Command) bool {
			t := m.turns[c.Turn]
			return t == nil || t.rec.State == StateFinished
		})
	}
	return n, ctx.Err()
}

// Listen implements Store.
func (m *Memory) Listen(ctx context.Context, replica string, changed func(string), commands func()) error {
	l := &memListener{replica: replica, changed: changed, commands: commands}
	m.mu.Lock()
	m.listeners[l] = struct{}{}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	delete(m.listeners, l)
	m.mu.Unlock()
	return ctx.Err()
}

// changed notes a change of turn id to the listeners. Call with m.mu.
func (m *Memory) changed(id string) {
	for l := range m.listeners {
		go l.changed(id)
	}
}

var _ ReplicaLister = (*Memory)(nil)

// Replicas implements ReplicaLister.
func (m *Memory) Replicas(ctx context.Context) ([]Replica, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	by := map[string]*Replica{}
	for id, beat := range m.beats {
		by[id] = &Replica{ID: id, Heartbeat: beat, Age: now.Sub(beat)}
	}
	for _, t := range m.turns {
		if t.rec.State == StateFinished {
			continue
		}
		r := by[t.rec.Owner]
		if r == nil {
			r = &Replica{ID: t.rec.Owner}
			by[t.rec.Owner] = r
		}
		r.Turns++
	}
	out := make([]Replica, 0, len(by))
	for _, r := range by {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, ctx.Err()
}
