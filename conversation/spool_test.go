package conversation_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/conversation"
)

// failing is a store whose Puts fail, as a store that is down does.
type failing struct{ conversation.Store }

var errDown = errors.New("store is down")

func (failing) Put(context.Context, conversation.Meta, []conversation.File) error { return errDown }

func TestSpoolPush(t *testing.T) {
	ctx := context.Background()
	s := conversation.NewFS(filepath.Join(t.TempDir(), "store"))
	sp := conversation.NewSpool(filepath.Join(t.TempDir(), "spool"))

	// A conversation at revision 1, continued by a turn that could not be
	// stored, and a new conversation that could not be stored either.
	m := testMeta("c01cont")
	if err := s.Put(ctx, m, testFiles()); err != nil {
		t.Fatal(err)
	}
	m.Revision, m.Turns = 1, 2
	cont, err := sp.Save(m, testFiles())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Save(testMeta("c01new"), testFiles()); err != nil {
		t.Fatal(err)
	}
	// While the store is down, Push keeps everything.
	got, err := sp.Push(ctx, failing{s})
	if !errors.Is(err, errDown) || len(got) != 1 || got[0].File != cont {
		t.Fatalf("Push to a store that is down = %+v, %v", got, err)
	}
	if files, _ := sp.Files(); len(files) != 2 {
		t.Fatalf("spool after a failed push holds %d files, want 2", len(files))
	}
	got, err = sp.Push(ctx, s)
	if err != nil || len(got) != 2 {
		t.Fatalf("Push = %+v, %v", got, err)
	}
	stored, err := s.Meta(ctx, "c01cont")
	if err != nil || stored.Revision != 2 || stored.Turns != 2 {
		t.Errorf("pushed continuation: %+v, %v; want revision 2, 2 turns", stored, err)
	}
	if _, err := s.Meta(ctx, "c01new"); err != nil {
		t.Errorf("pushed new conversation: %v", err)
	}
	if files, _ := sp.Files(); len(files) != 0 {
		t.Errorf("spool after the push holds %v", files)
	}
	// A spooled turn whose conversation moved on meanwhile is kept as a fork.
	m.Revision = 1 // stale: the store is at 2
	if _, err := sp.Save(m, testFiles()); err != nil {
		t.Fatal(err)
	}
	got, err = sp.Push(ctx, s)
	if err != nil || len(got) != 1 || got[0].Stored == "c01cont" {
		t.Fatalf("Push of a stale turn = %+v, %v", got, err)
	}
	fork, err := s.Meta(ctx, got[0].Stored)
	if err != nil || fork.Parent != "c01cont" || fork.Turns != 2 {
		t.Errorf("stale turn kept as %+v, %v; want a fork of c01cont", fork, err)
	}
	if stored, _ := s.Meta(ctx, "c01cont"); stored.Revision != 2 {
		t.Errorf("the stale push changed the conversation: revision %d", stored.Revision)
	}
	// A damaged spool file is reported and kept.
	bad := filepath.Join(sp.Dir(), "c01bad-r0-1.conv")
	os.WriteFile(bad, []byte("not a conversation"), 0o600)
	got, err = sp.Push(ctx, s)
	if err != nil || len(got) != 1 || !errors.Is(got[0].Err, conversation.ErrInvalid) {
		t.Errorf("Push of a damaged file = %+v, %v", got, err)
	}
	if _, err := os.Stat(bad); err != nil {
		t.Errorf("the damaged file was removed: %v", err)
	}
}
