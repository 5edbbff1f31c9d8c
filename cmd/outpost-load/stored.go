package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/harness"
)

// stored are the figures of a run with --stored conversations.
type stored struct {
	Count       int      `json:"count"`
	SeedSeconds float64  `json:"seed_seconds"`
	Ops         []timing `json:"ops"`
	DiskBytes   int64    `json:"disk_bytes"`               // the store's growth on disk (storedcost.go)
	IndexBytes  int64    `json:"fs_index_bytes,omitempty"` // the directory store's in-memory index
}

// timing is one request's times over several tries.
type timing struct {
	Name   string  `json:"name"`
	Count  int     `json:"count"`
	Median float64 `json:"median_ms"`
	Max    float64 `json:"max_ms"`
	Bytes  int     `json:"bytes"` // of the last answer
}

// listPage is the page size the harness asks GET /v1/conversations for.
const listPage = 50

// storedRun puts cfg.stored conversations in the first server's store,
// then times the routes that read stored conversations.
func storedRun(ctx context.Context, cfg *config, f *fleet) (*stored, error) {
	st, closeStore, err := openStore(ctx, cfg, f)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	disk0, err := diskBytes(ctx, cfg, f)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ids, natives, err := seed(ctx, st, cfg.stored)
	if err != nil {
		return nil, err
	}
	out := &stored{Count: cfg.stored, SeedSeconds: time.Since(start).Seconds()}
	disk1, err := diskBytes(ctx, cfg, f)
	if err != nil {
		return nil, err
	}
	out.DiskBytes = disk1 - disk0
	if cfg.store == "" {
		if out.IndexBytes, err = indexBytes(ctx, f); err != nil {
			return out, err
		}
	}
	s := f.servers[0]
	const tries = 20
	newest := ids[len(ids)-1]
	for _, op := range []struct{ name, path string }{
		{fmt.Sprintf("GET /v1/conversations?limit=%d", listPage), fmt.Sprintf("/v1/conversations?limit=%d", listPage)},
		{"GET /v1/conversations/{id}", "/v1/conversations/" + newest},
		{"GET /v1/conversations/{native id}", "/v1/conversations/" + natives[len(natives)-1]},
		{"GET /v1/conversations/{id}/usage", "/v1/conversations/" + newest + "/usage"},
	} {
		t, err := timeGet(ctx, s, op.path, tries)
		if err != nil {
			return out, fmt.Errorf("%s: %w", op.name, err)
		}
		t.Name = op.name
		out.Ops = append(out.Ops, t)
	}
	t, err := timeResume(ctx, f, ids, 5)
	out.Ops = append(out.Ops, t)
	return out, err
}

// openStore opens the store the servers use: the PostgreSQL database of
// --store, or the first server's directory store.
func openStore(ctx context.Context, cfg *config, f *fleet) (conversation.Store, func(), error) {
	if cfg.store != "" {
		pg, err := postgres.Open(ctx, cfg.store, nil)
		if err != nil {
			return nil, nil, err
		}
		return pg, pg.Close, nil
	}
	if f.dir == "" {
		return nil, nil, fmt.Errorf("--stored needs a server the harness started")
	}
	return conversation.NewFS(filepath.Join(f.dir, f.servers[0].name, "outpost", "conversations")), func() {}, nil
}

// seed puts n conversations of one small file each, oldest first, 8 at a
// time; it returns their ids and native ids in that order.
func seed(ctx context.Context, st conversation.Store, n int) (ids, natives []string, err error) {
	ids, natives = make([]string, n), make([]string, n)
	base := time.Now().Add(-time.Duration(n) * time.Second)
	for i := range ids {
		ids[i], natives[i] = conversation.NewID(), newSessionID()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				native := natives[i]
				at := base.Add(time.Duration(i) * time.Second).UTC()
				m := conversation.Meta{ID: ids[i], Agent: "echo", Native: native, Workdir: "/work", Sandbox: memProvider,
					Created: at, Updated: at, Turns: 1, Usage: harness.Usage{InputTokens: 3, OutputTokens: 5}}
				f := conversation.File{Path: ".echo/sessions/" + native + ".jsonl", Mode: 0o600, Data: []byte(`{"role":"meta","id":"` + native + `"}` + "\n")}
				if err := st.Put(ctx, m, []conversation.File{f}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, nil, err
	}
	return ids, natives, ctx.Err()
}

// timeGet GETs path tries times, one after the other.
func timeGet(ctx context.Context, s *server, path string, tries int) (timing, error) {
	var ds []time.Duration
	t := timing{Count: tries}
	for range tries {
		r, err := http.NewRequestWithContext(ctx, "GET", "http://outpost"+path, nil)
		if err != nil {
			return t, err
		}
		start := time.Now()
		// No client timeout (the run's bounds it): the first request
		// after a start may read every stored conversation.
		resp, err := s.stream.Do(r)
		if err != nil {
			return t, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ds = append(ds, time.Since(start))
		if err != nil || resp.StatusCode != http.StatusOK {
			return t, fmt.Errorf("%d %s", resp.StatusCode, b[:min(len(b), 300)])
		}
		t.Bytes = len(b)
	}
	ds = sortedDurations(ds)
	t.Median, t.Max = percentile(ds, .5), percentile(ds, 1)
	return t, nil
}
