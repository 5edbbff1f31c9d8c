package conversation_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/storetest"
)

var (
	_ conversation.ObjectStorer = (*conversation.FS)(nil)
	_ conversation.ObjectStorer = (*storetest.Memory)(nil)
)

func TestFSObjectsConformance(t *testing.T) {
	objectstest.RunConformanceTests(t, func(t *testing.T) checkpoint.Objects {
		return conversation.NewFS(t.TempDir()).Objects()
	})
}

func TestMemoryObjectsConformance(t *testing.T) {
	objectstest.RunConformanceTests(t, func(t *testing.T) checkpoint.Objects {
		return storetest.NewMemory().Objects()
	})
}

// TestFSObjects checks where the filesystem store keeps objects, that it
// makes one object store per FS value, and that the store's readers of
// conversations ignore it.
func TestFSObjects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := conversation.NewFS(dir)
	var wg sync.WaitGroup
	got := make([]checkpoint.Objects, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = s.Objects()
		}()
	}
	wg.Wait()
	for _, o := range got {
		if o != got[0] {
			t.Fatalf("Objects() returned several stores: %v", got)
		}
	}
	// A checkpoint.Dir, its operations counted (internal/storeops).
	d, ok := got[0].(interface{ Path() string })
	if !ok || d.Path() != filepath.Join(dir, "checkpoints.git") {
		t.Fatalf("Objects() = %#v, want a checkpoint.Dir at <dir>/checkpoints.git", got[0])
	}
	h := objectstest.NewHistory(t, "fs objects")
	if err := s.Objects().Write(ctx, h.All()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "checkpoints.git", "objects")); err != nil || !fi.IsDir() {
		t.Fatalf("no repository at <dir>/checkpoints.git: %v", err)
	}
	// Another FS on the same directory reads them.
	if miss, err := conversation.NewFS(dir).Objects().Missing(ctx, objectstest.Hashes(h.All())); err != nil || len(miss) != 0 {
		t.Errorf("another FS on the directory: Missing = %v, %v", miss, err)
	}
	// The repository is no conversation.
	if err := s.Put(ctx, testMeta("c01beside"), testFiles()); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "c01beside" {
		t.Errorf("List = %v, %v; want only c01beside", list, err)
	}
	if damage, err := s.Check(ctx); err != nil || len(damage) != 0 {
		t.Errorf("Check = %v, %v; want no damage", damage, err)
	}
	if _, err := conversation.Resolve(ctx, s, "checkpoints.git"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Resolve(checkpoints.git): %v, want ErrNotFound", err)
	}
}

func TestFSObjectsWithoutDir(t *testing.T) {
	objs := conversation.NewFS("").Objects()
	ctx := context.Background()
	if err := objs.Write(ctx, nil); err == nil {
		t.Error("Write into the objects of a store without a directory succeeded")
	}
	if _, err := objs.Read(ctx, plumbing.ZeroHash); err == nil {
		t.Error("Read from the objects of a store without a directory succeeded")
	}
	if _, err := objs.Missing(ctx, nil); err == nil {
		t.Error("Missing in the objects of a store without a directory succeeded")
	}
}
