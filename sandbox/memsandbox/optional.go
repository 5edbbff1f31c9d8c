package memsandbox

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/snapshot"
)

// The optional interfaces of the driver contract the in-memory sandbox
// implements, so the conformance suite and the engine's tests exercise
// them without Docker: Lister, Snapshotter, Warmer (sandboxes) and
// Collector (the provider). Vanisher and PathLooker are in memsandbox.go.
var (
	_ driver.Lister      = (*Sandbox)(nil)
	_ driver.Snapshotter = (*Sandbox)(nil)
	_ driver.Warmer      = (*Sandbox)(nil)
	_ driver.Vanisher    = (*Sandbox)(nil)
	_ driver.PathLooker  = (*Sandbox)(nil)
	_ driver.Collector   = (*Provider)(nil)
)

// tree returns the entries of dir (not following a final link) named
// relative to dir, parents before children, in lexical order within each
// directory; dir itself is left out. A dir that is not a directory gives
// an *fs.PathError wrapping syscall.ENOTDIR.
func (s *Sandbox) tree(ctx context.Context, op, dir string) ([]entry, error) {
	entries, err := s.entries(ctx, dir)
	if err != nil {
		return nil, err
	}
	if !entries[0].n.isDir() {
		return nil, pathErr(op, dir, syscall.ENOTDIR)
	}
	top := entries[0].name + "/"
	out := entries[1:]
	for i := range out {
		out[i].name = strings.TrimPrefix(out[i].name, top)
	}
	return out, nil
}

// List implements driver.Lister: the regular files under dir, relative to
// it, links neither followed nor listed.
func (s *Sandbox) List(ctx context.Context, dir string) ([]string, error) {
	entries, err := s.tree(ctx, "list", dir)
	if err != nil {
		return nil, err
	}
	files := []string{}
	for _, e := range entries {
		if e.n.mode.IsRegular() {
			files = append(files, e.name)
		}
	}
	sort.Strings(files)
	return files, nil
}

// SnapshotWorkspace implements driver.Snapshotter: the workspace's regular
// files and links, in snapshot.Walk's order, without .git and .outpost.
func (s *Sandbox) SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error) {
	entries, err := s.tree(ctx, "snapshot", s.workdir)
	if err != nil {
		return snapshot.Snapshot{}, err
	}
	snap := snapshot.Snapshot{Files: map[string]snapshot.FileStat{}, Complete: true}
	for _, e := range entries {
		if e.n.isDir() || snapshot.Skip(e.name) {
			continue
		}
		if len(snap.Files) >= limit {
			snap.Complete = false
			return snap, nil
		}
		size := int64(len(e.n.data))
		if e.n.isSymlink() {
			size = int64(len(e.n.target))
		}
		snap.Files[e.name] = snapshot.FileStat{Size: size, ModTime: e.n.mtime.UnixNano(), Mode: uint32(e.n.mode)}
		snap.Last = e.name
	}
	snap.Last = ""
	return snap, nil
}

// Warm implements driver.Warmer. An in-memory process costs nothing to
// start, so there is no launcher to ready: it only refuses a sandbox that
// is closed or vanished.
func (s *Sandbox) Warm(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	return ctx.Err()
}

// Collect implements driver.Collector. Every in-memory sandbox belongs to
// this process, which is alive: nothing is left behind by a dead one, and
// all are kept, except with All, which removes each open sandbox as
// Remove does (its users see it vanish).
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	p.mu.Lock()
	ids := slices.Sorted(maps.Keys(p.sandboxes))
	p.mu.Unlock()
	col := driver.Collection{Where: Name}
	if !opts.All {
		col.Kept = len(ids)
		return col, nil
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return col, err
		}
		o := driver.Orphan{Kind: "sandbox", Name: id, Owner: "this process", State: "alive"}
		if !opts.DryRun {
			_ = p.Remove(id) // its only error: closed meanwhile, gone too
			o.Removed = true
		}
		col.Orphans = append(col.Orphans, o)
	}
	return col, nil
}
