package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
	"github.com/outposthq/outpost/conversation"
)

// checkpoints returns n checkpoints as a conversation of n turns records
// them (ids need not name stored objects: a Store keeps them as text).
func checkpoints(n int) []conversation.Checkpoint {
	out := make([]conversation.Checkpoint, n)
	for i := range out {
		turn := i + 1
		out[i] = conversation.Checkpoint{
			Turn:         turn,
			Commit:       fakeID("commit", turn),
			Base:         fakeID("commit", turn-1),
			Memory:       fakeID("memory", turn),
			Revision:     int64(turn),
			Files:        10 * turn,
			Bytes:        1000 * int64(turn),
			Changed:      turn,
			Conversation: "c01parentconv",
			Created:      t0.Add(time.Duration(turn) * time.Minute),
		}
	}
	if n > 0 {
		out[0].Base = ""
		out[n-1].Conversation = "" // made in this conversation
	}
	return out
}

func fakeID(kind string, turn int) string {
	return checkpoint.NewObject(plumbing.CommitObject, []byte(kind+string(rune('0'+turn)))).Hash.String()
}

// testCheckpoints checks that Meta.Checkpoints round-trip through Put,
// Get, Meta and List, and are replaced with the rest of the metadata.
func testCheckpoints(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	m := meta("c01checkpoints", t0)
	m.Checkpoints = checkpoints(2)
	files := []conversation.File{{Path: "f", Mode: 0o600, Data: []byte("f")}}
	mustPut(t, s, m, files)
	want := m
	want.Checkpoints = checkpoints(2)
	m.Checkpoints[0].Commit = "changed by the caller after Put"
	checkStored(t, s, want, files)

	got, err := s.Meta(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Checkpoints) > 0 {
		got.Checkpoints[0].Turn = 99 // the caller's copy
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("List = %d conversations, want 1", len(list))
	}
	if d := cmp.Diff(want.Checkpoints, list[0].Checkpoints, opts...); d != "" {
		t.Errorf("List's checkpoints (-want +got):\n%s", d)
	}

	// A turn adds a checkpoint: the new metadata replaces the old.
	next := want
	next.Revision = 1
	next.Turns++
	next.Checkpoints = checkpoints(3)
	mustPut(t, s, next, files)
	next.Revision = 2
	checkStored(t, s, next, files)

	// And none is none.
	none := next
	none.Checkpoints = nil
	mustPut(t, s, none, files)
	none.Revision = 3
	checkStored(t, s, none, files)
}

// testObjectsOutliveDelete checks, for a store that keeps checkpoints'
// objects (conversation.ObjectStorer), that they are where the
// conversation's checkpoints say, and that deleting the conversation
// leaves them: objects are shared, and no store collects garbage yet.
func testObjectsOutliveDelete(t *testing.T, s conversation.Store) {
	st, ok := s.(conversation.ObjectStorer)
	if !ok {
		t.Skip("the store keeps no checkpoint objects (not a conversation.ObjectStorer)")
	}
	ctx := context.Background()
	objs := st.Objects()
	if objs == nil {
		t.Fatal("Objects() = nil")
	}
	h := objectstest.NewHistory(t, "outlive delete")
	if err := objs.Write(ctx, h.All()); err != nil {
		t.Fatalf("Objects().Write: %v", err)
	}
	m := meta("c01objects", t0)
	m.Checkpoints = []conversation.Checkpoint{{Turn: 1, Commit: h.Head().String(), Base: h.Commits[0].Hash.String(), Revision: 1, Created: t0}}
	mustPut(t, s, m, nil)
	if err := s.Delete(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	objs = st.Objects()
	if miss, err := objs.Missing(ctx, objectstest.Hashes(h.All())); err != nil || len(miss) != 0 {
		t.Errorf("after Delete, Missing = %v, %v; want none", miss, err)
	}
	got, err := checkpoint.Reachable(ctx, objs, []plumbing.Hash{h.Head()})
	if err != nil || len(got) != len(h.All()) {
		t.Errorf("after Delete, Reachable(head) = %d objects, %v; want %d", len(got), err, len(h.All()))
	}
	if _, err := objs.Read(ctx, plumbing.ComputeHash(plumbing.BlobObject, []byte("never written"))); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Read of an unknown object: %v, want checkpoint.ErrNotFound", err)
	}
}
