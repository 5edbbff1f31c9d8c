package conversation

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkFSFirstPage times the first page of a directory store of
// $OUTPOST_BENCH_STORED conversations (1,000 unless set; 100,000 is the
// issue's size) on a new FS value, as after a server's start ("cold":
// the index file written by an earlier process is all it has;
// "cold-stale": the directory changed since it was written) and on one
// that listed before ("warm"). The conversations are written once into
// $OUTPOST_BENCH_DIR (a temporary directory unless set, then reused)
// without Put's fsyncs, which would take most of an hour at 100,000.
func BenchmarkFSFirstPage(b *testing.B) {
	n := 1000
	if v := os.Getenv("OUTPOST_BENCH_STORED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := os.Getenv("OUTPOST_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	dir = filepath.Join(dir, strconv.Itoa(n))
	seedFS(b, dir, n)
	ctx := context.Background()
	page := func(s *FS) {
		p, _, err := s.ListPage(ctx, PageQuery{Limit: 50})
		if err != nil || len(p) != min(50, n) {
			b.Fatalf("page: %d, %v", len(p), err)
		}
	}
	// The index file: written by the first, vouched for by the
	// directory's time at the second.
	page(NewFS(dir))
	page(NewFS(dir))
	b.Run("cold", func(b *testing.B) {
		for range b.N {
			page(NewFS(dir))
		}
	})
	// stale: the directory changed since the index file was written (its
	// time moved, no conversation changed): the index file's entries,
	// each checked against its file's time and size.
	b.Run("cold-stale", func(b *testing.B) {
		for range b.N {
			now := time.Now()
			if err := os.Chtimes(dir, now, now); err != nil {
				b.Fatal(err)
			}
			page(NewFS(dir))
		}
	})
	b.Run("warm", func(b *testing.B) {
		s := NewFS(dir)
		page(s)
		b.ResetTimer()
		for range b.N {
			page(s)
		}
	})
}

// seedFS writes n conversations into dir unless it holds them already
// (its file "seeded" says so), oldest first a second apart.
func seedFS(b *testing.B, dir string, n int) {
	if _, err := os.Stat(filepath.Join(dir, "seeded")); err == nil {
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		at := base.Add(time.Duration(i) * time.Second)
		m := Meta{ID: NewID(), Agent: "echo", Native: fmt.Sprintf("native-%08d", i), Workdir: "/work", Sandbox: "memory-echo",
			Created: at, Updated: at, Turns: 1, Revision: 1}
		f, err := os.Create(filepath.Join(dir, m.ID+convExt))
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(f)
		m.Files = []string{".echo/s.jsonl"}
		if err := encode(w, m, []File{{Path: ".echo/s.jsonl", Mode: 0o600, Data: []byte("{}\n")}}, nil); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "seeded"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
}
