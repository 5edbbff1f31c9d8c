package conversation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// TestFSIndexFile: a new FS value (a new process) pages through the store
// with the index file an earlier one wrote, reading only the page's files
// and, when the directory changed since, the conversations that changed;
// an index file that is damaged, or of another directory, is rebuilt,
// never believed. Before the file, every new FS read every conversation.
func TestFSIndexFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := NewFS(dir)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	put := func(i int) {
		m := Meta{ID: fmt.Sprintf("c01idx%03d", i), Agent: "echo", Native: fmt.Sprintf("native-%d", i), Workdir: "/w", Sandbox: "local",
			Created: at, Updated: at.Add(time.Duration(i) * time.Second), Revision: AnyRevision}
		if err := s.Put(ctx, m, []File{{Path: "f", Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		put(i)
	}
	// ageFiles moves the conversations' times and the directory's an
	// hour back, as if the last Put were that old (a test does not wait a
	// second for the directory's time to vouch for a scan); ageDir the
	// directory's alone.
	old := time.Now().Add(-time.Hour)
	ageDir := func() { os.Chtimes(dir, old, old) }
	ageFiles := func() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), convExt) {
				os.Chtimes(filepath.Join(dir, e.Name()), old, old)
			}
		}
		ageDir()
	}
	type cost struct{ reads, scans, loads int64 }
	page := func(want string) cost {
		t.Helper()
		r0, s0, l0 := fileReads.Load(), dirScans.Load(), indexLoads.Load()
		p, _, err := NewFS(dir).ListPage(ctx, PageQuery{Limit: 5})
		if err != nil || len(p) != 5 || p[0].ID != want {
			t.Fatalf("page: %d, %v, want %s first", len(p), err, want)
		}
		return cost{fileReads.Load() - r0, dirScans.Load() - s0, indexLoads.Load() - l0}
	}
	ageFiles()
	if c := page("c01idx019"); c != (cost{20 + 5, 1, 0}) {
		t.Errorf("no index file: %+v, want every file read, then the page", c)
	}
	ageDir() // making .index moved the directory's time
	if c := page("c01idx019"); c != (cost{5, 1, 1}) {
		t.Errorf("an index file whose scan the directory's time does not vouch for: %+v, want a scan reading no file, then the page", c)
	}
	if c := page("c01idx019"); c != (cost{5, 0, 1}) {
		t.Errorf("with the index file: %+v, want the page's files only, no scan", c)
	}
	put(20)
	if err := s.Delete(ctx, "c01idx003"); err != nil {
		t.Fatal(err)
	}
	if c := page("c01idx020"); c != (cost{1 + 5, 1, 1}) {
		t.Errorf("stale index file: %+v, want a scan reading the new conversation, then the page", c)
	}
	if _, err := Resolve(ctx, NewFS(dir), "native-3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a deleted conversation's native id resolved: %v", err)
	}

	idx := filepath.Join(dir, indexFile)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{b[:len(b)/2], append(slices.Clone(b[:40]), append([]byte{b[40] ^ 1}, b[41:]...)...), []byte("garbage")} {
		ageFiles()
		if err := os.WriteFile(idx, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if c := page("c01idx020"); c != (cost{20 + 5, 1, 0}) {
			t.Errorf("damaged index file (%d bytes): %+v, want it rebuilt from every file", len(bad), c)
		}
		if c := page("c01idx020"); c != (cost{5, 0, 1}) {
			t.Errorf("after the rebuild: %+v, want the page's files only", c)
		}
	}

	// Another directory's index file (a copy of the store) is rebuilt.
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, ".index"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(idx)
	if err := os.WriteFile(filepath.Join(other, indexFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, _, err := NewFS(other).ListPage(ctx, PageQuery{Limit: 5}); err != nil || len(p) != 0 {
		t.Errorf("an empty store with another's index file: %d conversations, %v", len(p), err)
	}
}

// TestFSIndexFileConcurrentWriters: processes sharing a store (FS values
// here) write conversations and page through them at once, each writing
// the index file in turn; afterwards a new one's pages are the store's.
func TestFSIndexFileConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := NewFS(dir)
			for i := range 10 {
				m := Meta{ID: fmt.Sprintf("c01w%d-%02d", w, i), Agent: "echo", Native: fmt.Sprintf("n%d-%d", w, i), Workdir: "/w", Sandbox: "local",
					Created: at, Updated: at.Add(time.Duration(i*3+w) * time.Second)}
				if err := s.Put(ctx, m, []File{{Path: "f", Data: []byte("x")}}); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := NewFS(dir).ListPage(ctx, PageQuery{Limit: 4}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	all, err := NewFS(dir).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paged []string
	s := NewFS(dir)
	for after := ""; ; {
		p, next, err := s.ListPage(ctx, PageQuery{Limit: 7, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p {
			paged = append(paged, m.ID)
		}
		if after = next; next == "" {
			break
		}
	}
	if len(all) != 30 || len(paged) != 30 {
		t.Fatalf("listed %d, paged %d, want 30", len(all), len(paged))
	}
	for i, m := range all {
		if paged[i] != m.ID {
			t.Fatalf("page order %v, list order differs at %d (%s)", paged, i, m.ID)
		}
	}
}
