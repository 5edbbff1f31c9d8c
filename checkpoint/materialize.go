package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// MaterializeOptions adjust Materialize.
type MaterializeOptions struct {
	// Index is the stat cache to write for dir (IndexPath), so the next
	// Snapshot of it reads only what changed; empty: none.
	Index string
	// When is the modification time given to every file (the
	// checkpoint's time); zero: the time of writing.
	When time.Time
}

// Materialize writes the tree into dir, which must not exist or be empty
// (ErrUnsafe otherwise): files with their modes, links as links (never
// followed). Every write goes through an os.Root of dir, so no entry,
// however named, lands outside it. On error dir may hold part of the
// tree.
func Materialize(ctx context.Context, objs Objects, tree plumbing.Hash, dir string, o *MaterializeOptions) (Tree, error) {
	if o == nil {
		o = &MaterializeOptions{}
	}
	started := time.Now()
	files, err := List(ctx, objs, tree)
	if err != nil {
		return Tree{}, err
	}
	if err := EmptyDir(dir); err != nil {
		return Tree{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Tree{}, fmt.Errorf("checkpoint: materialize: %w", err)
	}
	defer root.Close()
	if err := makeDirs(root, files); err != nil {
		return Tree{}, err
	}
	es := make([]entry, len(files))
	if err := parallel(ctx, len(files), func(ctx context.Context, i int) error {
		return writeEntry(ctx, objs, root, files[i], o.When, &es[i])
	}); err != nil {
		return Tree{}, err
	}
	t := Tree{Hash: tree, Files: len(files)}
	for _, e := range es {
		t.Bytes += e.size
	}
	if o.Index != "" {
		saveIndex(o.Index, dir, started, tree, es)
	}
	return t, nil
}

// EmptyDir makes dir, or checks that it is an empty directory
// (ErrUnsafe otherwise): where a checkpoint may be materialised.
func EmptyDir(dir string) error {
	des, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("checkpoint: materialize: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint: materialize: %w", err)
	case len(des) > 0:
		return fmt.Errorf("%w: %s is not empty: a checkpoint is materialised only into a new or empty directory", ErrUnsafe, dir)
	}
	return nil
}

// makeDirs makes the directories the files need, parents first.
func makeDirs(root *os.Root, files []File) error {
	made := map[string]bool{}
	for _, f := range files {
		d := path.Dir(f.Path)
		if d == "." || made[d] {
			continue
		}
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnsafe, d, err)
		}
		made[d] = true
	}
	return nil
}

// writeEntry writes one file or link, and records its stat for the cache.
func writeEntry(ctx context.Context, objs Objects, root *os.Root, f File, when time.Time, e *entry) error {
	data, err := ReadBlob(ctx, objs, f.Hash)
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", f.Path, err)
	}
	name := filepath.FromSlash(f.Path)
	switch f.Mode {
	case filemode.Symlink:
		if err := root.Symlink(string(data), name); err != nil {
			return fmt.Errorf("checkpoint: materialize %s: %w", f.Path, err)
		}
	default:
		perm := os.FileMode(0o644)
		if f.Mode == filemode.Executable {
			perm = 0o755
		}
		w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return fmt.Errorf("checkpoint: materialize %s: %w", f.Path, err)
		}
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("checkpoint: materialize %s: %w", f.Path, err)
		}
		if !when.IsZero() {
			_ = root.Chtimes(name, when, when)
		}
	}
	fi, err := root.Lstat(name)
	if err != nil {
		return fmt.Errorf("checkpoint: materialize %s: %w", f.Path, err)
	}
	*e = entry{rel: f.Path, mode: f.Mode, st: statOf(fi), hash: f.Hash, size: int64(len(data))}
	return nil
}

// parallel runs f for 0..n-1 on a few goroutines, stopping at the first
// error.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0)*2, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
