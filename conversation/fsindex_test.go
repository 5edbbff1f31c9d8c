package conversation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/storeops"
)

func storeopsCount(store, op string) uint64 {
	for _, o := range storeops.All() {
		if o.Store == store && o.Op == op {
			return o.N
		}
	}
	return 0
}

// TestFSIndexReads: once an FS has read its conversations, a page reads
// only the page's files, a native id resolves with no file read, and a
// conversation stored since is the one file read again. Before the
// index, every page and every native id read every file (List).
func TestFSIndexReads(t *testing.T) {
	ctx := context.Background()
	s := NewFS(t.TempDir())
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	put := func(i int) {
		m := Meta{ID: fmt.Sprintf("c01idx%03d", i), Agent: "echo", Native: fmt.Sprintf("native-%d", i), Workdir: "/w", Sandbox: "local",
			Created: at, Updated: at.Add(time.Duration(i) * time.Second)}
		if err := s.Put(ctx, m, []File{{Path: "f", Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		put(i)
	}
	reads := func(f func()) int64 {
		before := fileReads.Load()
		f()
		return fileReads.Load() - before
	}
	page := func() {
		p, next, err := ListPage(ctx, s, PageQuery{Limit: 5})
		if err != nil || len(p) != 5 || next == "" || p[0].ID != "c01idx029" {
			t.Fatalf("page: %d, %q, %v", len(p), next, err)
		}
	}
	if n := reads(page); n != 30+5 {
		t.Errorf("the first page read %d files, want 35 (the index, then the page)", n)
	}
	if n := reads(page); n != 5 {
		t.Errorf("the second page read %d files, want the page's 5", n)
	}
	if n := reads(func() {
		if id, err := Resolve(ctx, s, "native-7"); err != nil || id != "c01idx007" {
			t.Fatalf("Resolve: %q %v", id, err)
		}
	}); n != 0 {
		t.Errorf("resolving a native id read %d files, want none", n)
	}
	ids := func(f func()) uint64 {
		before := storeopsCount("filesystem", "resolve")
		f()
		return storeopsCount("filesystem", "resolve") - before
	}
	if n := ids(func() {
		if id, err := Resolve(ctx, s, "c01idx007"); err != nil || id != "c01idx007" {
			t.Fatalf("Resolve: %q %v", id, err)
		}
	}); n != 0 {
		t.Errorf("resolving an id read the directory %d times, want none (its file's name is enough)", n)
	}
	if n := ids(func() {
		if id, err := Resolve(ctx, s, "native-8"); err != nil || id != "c01idx008" {
			t.Fatalf("Resolve: %q %v", id, err)
		}
	}); n != 0 {
		t.Errorf("resolving a native id read the directory's names %d times, want none (the index has them)", n)
	}
	put(30)
	if n := reads(func() { ListPage(ctx, s, PageQuery{Limit: 5}) }); n != 1+5 {
		t.Errorf("a page after a Put read %d files, want 6 (the new one, then the page)", n)
	}
}
