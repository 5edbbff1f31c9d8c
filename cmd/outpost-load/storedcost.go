package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/conversation"
)

// What N stored conversations cost beside the reads' latency
// (storedRun): the store's bytes on disk, the memory of the directory
// store's in-memory index, and the latency of a turn that resumes one of
// them (open: its file read and restored into a sandbox).

// diskBytes is what the store holds on disk: the blocks of the directory
// store's files, or the PostgreSQL database's size (pg_database_size).
func diskBytes(ctx context.Context, cfg *config, f *fleet) (int64, error) {
	if cfg.store != "" {
		c, err := pgx.Connect(ctx, cfg.store)
		if err != nil {
			return 0, err
		}
		defer c.Close(ctx)
		var n int64
		err = c.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
		return n, err
	}
	var n int64
	err := filepath.WalkDir(fsDir(f), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // nothing stored yet
	}
	return n, err
}

func fsDir(f *fleet) string {
	return filepath.Join(f.dir, f.servers[0].name, "outpost", "conversations")
}

// indexBytes is the heap a directory store's index of the stored
// conversations takes once a first page was listed: measured in this
// process, on a store value of its own over the server's directory, as
// the live heap after a collection, before and after.
func indexBytes(ctx context.Context, f *fleet) (int64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := conversation.NewFS(fsDir(f))
	if _, _, err := s.ListPage(ctx, conversation.PageQuery{Limit: listPage}); err != nil {
		return 0, err
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	// At a few conversations the collector's noise is larger than the
	// index: a figure for hundreds and more.
	return max(int64(after.HeapAlloc)-int64(before.HeapAlloc), 0), nil
}

// timeResume runs tries turns, one after the other, each resuming a
// different stored conversation (spread over the store, oldest to
// newest), and times them from the submit to the result.
func timeResume(ctx context.Context, f *fleet, ids []string, tries int) (timing, error) {
	d := &loader{cfg: &config{watchers: 1}, fleet: f, peaks: &peaks{}}
	t := timing{Name: "resume a stored conversation (submit → result)", Count: tries}
	var ds []time.Duration
	for i := range tries {
		id := ids[i*(len(ids)-1)/max(tries-1, 1)]
		st := d.turn(ctx, f.servers[0], "resume", id)
		if st.err != nil || st.results != 1 || st.code != "" {
			return t, fmt.Errorf("resuming %s: %v (code %q, %d results)", id, st.err, st.code, st.results)
		}
		ds = append(ds, st.result)
	}
	ds = sortedDurations(ds)
	t.Median, t.Max = percentile(ds, .5), percentile(ds, 1)
	return t, nil
}
