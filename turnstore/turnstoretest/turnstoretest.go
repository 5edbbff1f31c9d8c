// Package turnstoretest is the conformance suite of turnstore.Store
// implementations.
package turnstoretest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/turnstore"
)

// Run runs the suite; open returns an empty store for one test.
func Run(t *testing.T, open func(t *testing.T) turnstore.Store) {
	for _, c := range []struct {
		name string
		f    func(t *testing.T, s turnstore.Store)
	}{
		{"Lifecycle", lifecycle},
		{"Bound", bound},
		{"Commands", commands},
		{"Reap", reap},
		{"Expire", expire},
		{"Listen", listen},
		{"Replicas", replicas},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, open(t)) })
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTurn(id, owner string) turnstore.Turn {
	return turnstore.Turn{ID: id, Owner: owner, Agent: "echo", Sandbox: "local", State: turnstore.StateQueued, Created: t0}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func evs(from, to int64, size int) []turnstore.Event {
	var out []turnstore.Event
	for s := from; s <= to; s++ {
		d := fmt.Sprintf(`{"n":%d}`, s)
		for len(d) < size {
			d += " "
		}
		out = append(out, turnstore.Event{Seq: s, Data: []byte(d)})
	}
	return out
}

func seqs(es []turnstore.Event) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// lifecycle: create, start, append, finish once, replay, not found.
func lifecycle(t *testing.T, s turnstore.Store) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "tnone"); !errors.Is(err, turnstore.ErrNotFound) {
		t.Fatalf("Get of an unknown turn: %v, want ErrNotFound", err)
	}
	must(t, s.Create(ctx, newTurn("t1", "a")))
	must(t, s.Start(ctx, "t1", t0.Add(time.Second)))
	must(t, s.Append(ctx, "t1", evs(1, 3, 0), 1<<20))
	must(t, s.Append(ctx, "t1", evs(3, 4, 0), 1<<20)) // 3 again: not doubled
	ok, err := s.Finish(ctx, "t1", turnstore.Event{Seq: 5, Data: []byte(`{"type":"result"}`)}, t0.Add(2*time.Second))
	if err != nil || !ok {
		t.Fatalf("Finish: %v %v", ok, err)
	}
	if ok, err := s.Finish(ctx, "t1", turnstore.Event{Seq: 6, Data: []byte(`{"type":"result","again":true}`)}, t0); err != nil || ok {
		t.Fatalf("second Finish: %v %v, want false", ok, err)
	}
	must(t, s.Append(ctx, "t1", evs(6, 7, 0), 1<<20)) // ignored: finished
	rec, got, err := s.Replay(ctx, "t1", 1, 100)
	must(t, err)
	want := turnstore.Turn{ID: "t1", Owner: "a", Agent: "echo", Sandbox: "local", State: turnstore.StateFinished,
		Created: t0, Started: t0.Add(time.Second), Finished: t0.Add(2 * time.Second), Result: []byte(`{"type":"result"}`), Last: 5, First: 1}
	if d := cmp.Diff(want, normal(rec)); d != "" {
		t.Errorf("record (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{2, 3, 4, 5}, seqs(got)); d != "" {
		t.Errorf("replayed seqs (-want +got):\n%s", d)
	}
	if string(got[3].Data) != `{"type":"result"}` || string(got[0].Data) != `{"n":2}` {
		t.Errorf("replayed data: %q ... %q", got[0].Data, got[3].Data)
	}
	if _, got, _ := s.Replay(ctx, "t1", 0, 2); len(got) != 2 {
		t.Errorf("Replay with limit 2: %d events", len(got))
	}
}

// normal makes times comparable across stores.
func normal(r turnstore.Turn) turnstore.Turn {
	for _, p := range []*time.Time{&r.Created, &r.Started, &r.Finished} {
		if !p.IsZero() {
			*p = p.UTC()
		}
	}
	return r
}

// bound: the oldest events are dropped beyond maxBytes, the newest kept.
func bound(t *testing.T, s turnstore.Store) {
	ctx := context.Background()
	must(t, s.Create(ctx, newTurn("t2", "a")))
	must(t, s.Append(ctx, "t2", evs(1, 10, 100), 350)) // keeps 8, 9, 10
	rec, got, err := s.Replay(ctx, "t2", 0, 100)
	must(t, err)
	if d := cmp.Diff([]int64{8, 9, 10}, seqs(got)); d != "" {
		t.Errorf("retained (-want +got):\n%s", d)
	}
	if rec.First != 8 || rec.Dropped != 700 || rec.Last != 10 {
		t.Errorf("First %d Dropped %d Last %d, want 8 700 10", rec.First, rec.Dropped, rec.Last)
	}
	must(t, s.Append(ctx, "t2", evs(11, 11, 1000), 350)) // over alone: kept alone
	rec, got, _ = s.Replay(ctx, "t2", 0, 100)
	if d := cmp.Diff([]int64{11}, seqs(got)); d != "" || rec.First != 11 {
		t.Errorf("one event over the bound: first %d (-want +got):\n%s", rec.First, d)
	}
}

// commands reach the owner only, once; a finished turn refuses them.
func commands(t *testing.T, s turnstore.Store) {
	ctx := context.Background()
	must(t, s.Create(ctx, newTurn("t3", "a")))
	must(t, s.Create(ctx, newTurn("t4", "b")))
	must(t, s.Send(ctx, turnstore.Command{Turn: "t3", Kind: turnstore.Steer, Text: "one"}))
	must(t, s.Send(ctx, turnstore.Command{Turn: "t4", Kind: turnstore.Cancel}))
	must(t, s.Send(ctx, turnstore.Command{Turn: "t3", Kind: turnstore.Cancel}))
	got, err := s.Take(ctx, "a")
	must(t, err)
	want := []turnstore.Command{{Turn: "t3", Kind: turnstore.Steer, Text: "one"}, {Turn: "t3", Kind: turnstore.Cancel}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("a's commands (-want +got):\n%s", d)
	}
	if again, _ := s.Take(ctx, "a"); len(again) != 0 {
		t.Errorf("Take twice: %v", again)
	}
	if _, err := s.Finish(ctx, "t4", turnstore.Event{Seq: 1, Data: []byte(`{}`)}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, turnstore.Command{Turn: "t4", Kind: turnstore.Cancel}); !errors.Is(err, turnstore.ErrFinished) {
		t.Errorf("Send to a finished turn: %v, want ErrFinished", err)
	}
	if err := s.Send(ctx, turnstore.Command{Turn: "tnone", Kind: turnstore.Cancel}); !errors.Is(err, turnstore.ErrNotFound) {
		t.Errorf("Send to an unknown turn: %v, want ErrNotFound", err)
	}
}

// reap ends the unfinished turns of silent replicas only, once.
func reap(t *testing.T, s turnstore.Store) {
	ctx := context.Background()
	must(t, s.Beat(ctx, "alive"))
	must(t, s.Beat(ctx, "dead"))
	for _, tr := range []turnstore.Turn{newTurn("t5", "alive"), newTurn("t6", "dead"), newTurn("t7", "dead"), newTurn("t8", "never")} {
		must(t, s.Create(ctx, tr))
	}
	must(t, s.Append(ctx, "t6", evs(1, 2, 0), 1<<20))
	must(t, s.Leave(ctx, "dead"))
	lost := func(tr turnstore.Turn) []byte { return []byte(`{"type":"result","lost":"` + tr.Owner + `"}`) }
	ids, err := s.Reap(ctx, time.Hour, lost)
	must(t, err)
	if d := cmp.Diff([]string{"t6", "t7", "t8"}, ids); d != "" {
		t.Errorf("reaped (-want +got):\n%s", d)
	}
	rec, got, _ := s.Replay(ctx, "t6", 0, 10)
	if rec.State != turnstore.StateFinished || string(rec.Result) != `{"type":"result","lost":"dead"}` || rec.Finished.IsZero() {
		t.Errorf("reaped record: %+v", rec)
	}
	if d := cmp.Diff([]int64{1, 2, 3}, seqs(got)); d != "" {
		t.Errorf("reaped turn's events (-want +got):\n%s", d)
	}
	if ids, _ := s.Reap(ctx, time.Hour, lost); len(ids) != 0 {
		t.Errorf("reaped again: %v", ids)
	}
	if rec, _ := s.Get(ctx, "t5"); rec.State != turnstore.StateQueued {
		t.Errorf("the live replica's turn: %s", rec.State)
	}
	// Abandon: one replica's, though it beats.
	must(t, s.Create(ctx, newTurn("t13", "other")))
	must(t, s.Beat(ctx, "other"))
	if ids, err := s.Abandon(ctx, "alive", lost); err != nil || !cmp.Equal(ids, []string{"t5"}) {
		t.Errorf("Abandon(alive): %v %v, want [t5]", ids, err)
	}
	if rec, _ := s.Get(ctx, "t5"); string(rec.Result) != `{"type":"result","lost":"alive"}` {
		t.Errorf("the abandoned turn: %+v", rec)
	}
	// silent 0: every heartbeat is too old.
	if ids, _ := s.Reap(ctx, 0, lost); !cmp.Equal(ids, []string{"t13"}) {
		t.Errorf("Reap(0): %v, want [t13]", ids)
	}
}

// expire removes the turns finished before the time, with their commands.
func expire(t *testing.T, s turnstore.Store) {
	ctx := context.Background()
	must(t, s.Create(ctx, newTurn("t9", "a")))
	must(t, s.Create(ctx, newTurn("t10", "a")))
	must(t, s.Create(ctx, newTurn("t11", "a")))
	must(t, s.Send(ctx, turnstore.Command{Turn: "t10", Kind: turnstore.Cancel}))
	s.Finish(ctx, "t9", turnstore.Event{Seq: 1, Data: []byte(`{}`)}, t0)
	s.Finish(ctx, "t10", turnstore.Event{Seq: 1, Data: []byte(`{}`)}, t0.Add(time.Hour))
	n, err := s.Expire(ctx, t0.Add(2*time.Hour))
	must(t, err)
	if n != 2 {
		t.Errorf("Expire: %d, want 2", n)
	}
	for id, want := range map[string]error{"t9": turnstore.ErrNotFound, "t10": turnstore.ErrNotFound, "t11": nil} {
		if _, err := s.Get(ctx, id); !errors.Is(err, want) {
			t.Errorf("Get %s after Expire: %v, want %v", id, err, want)
		}
	}
	if cs, _ := s.Take(ctx, "a"); len(cs) != 0 {
		t.Errorf("commands of expired turns: %v", cs)
	}
}

// listen hears changes of turns and commands for its replica.
func listen(t *testing.T, s turnstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan string, 100)
	cmds := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, "a", func(id string) { changed <- id }, func() { cmds <- struct{}{} })
	}()
	// Listening starts asynchronously: change a turn until it is heard.
	must(t, s.Create(ctx, newTurn("t12", "a")))
	heard := false
	for seq := int64(1); !heard; seq++ {
		must(t, s.Append(ctx, "t12", evs(seq, seq, 0), 1<<20))
		select {
		case id := <-changed:
			heard = id == "t12"
		case <-time.After(100 * time.Millisecond):
		}
		if seq > 200 {
			t.Fatal("no change heard")
		}
	}
	must(t, s.Send(ctx, turnstore.Command{Turn: "t12", Kind: turnstore.Cancel}))
	select {
	case <-cmds:
	case <-time.After(30 * time.Second):
		t.Fatal("no command heard")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Listen after cancel: %v", err)
	}
}

// replicas lists the replicas that beat, each with its unfinished turns,
// and the owners of unfinished turns that never beat (a store without
// turnstore.ReplicaLister skips it).
func replicas(t *testing.T, s turnstore.Store) {
	l, ok := s.(turnstore.ReplicaLister)
	if !ok {
		t.Skip("the store lists no replicas")
	}
	ctx := context.Background()
	must(t, s.Beat(ctx, "r1"))
	must(t, s.Beat(ctx, "r2"))
	for _, tr := range []turnstore.Turn{newTurn("t20", "r1"), newTurn("t21", "r1"), newTurn("t22", "r2"), newTurn("t23", "gone")} {
		must(t, s.Create(ctx, tr))
	}
	s.Finish(ctx, "t22", turnstore.Event{Seq: 1, Data: []byte(`{}`)}, t0)
	got, err := l.Replicas(ctx)
	must(t, err)
	type row struct {
		ID    string
		Beat  bool
		Turns int
	}
	var rows []row
	for _, r := range got {
		rows = append(rows, row{r.ID, !r.Heartbeat.IsZero(), r.Turns})
		if r.Age < 0 || r.Age > time.Hour {
			t.Errorf("replica %s: age %v", r.ID, r.Age)
		}
	}
	want := []row{{"gone", false, 1}, {"r1", true, 2}, {"r2", true, 0}}
	if d := cmp.Diff(want, rows); d != "" {
		t.Errorf("Replicas (-want +got):\n%s", d)
	}
}
