package sandboxtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The optional interfaces of the driver contract, driven through the
// portable layer only: a provider that implements one passes its test, a
// provider that lacks one gets the portable layer's answer for it
// (errors.ErrUnsupported, nothing to do, or false).

// unsupported skips the rest of a test when err says the provider lacks
// the operation, after checking that the portable layer coded it.
func unsupported(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if outpost.CodeOf(err) == "" {
		t.Errorf("%s: an uncoded error: %v", what, err)
	}
	t.Skipf("%s: the provider lacks it: %v", what, err)
}

// testWorkspaceSnapshot (driver.Snapshotter): the snapshot describes the
// files of the workspace, sees what a process wrote, skips .git, and
// stops at its bound (a sandbox may not write .outpost: docker's copy
// mode refuses it on release).
func (s *suite) testWorkspaceSnapshot(t *testing.T) {
	l := s.lease(t)
	_, err := l.SnapshotWorkspace(t.Context(), 100)
	unsupported(t, err, "SnapshotWorkspace")
	wd := l.Workdir()
	if err := WriteFiles(t.Context(), l, wd, []tarsafe.File{
		{Name: "keep.txt", Data: []byte("same")},
		{Name: "edit.txt", Data: []byte("old")},
		{Name: ".git/HEAD", Data: []byte("ref")},
	}); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	before, err := l.SnapshotWorkspace(t.Context(), 100)
	if err != nil {
		t.Fatalf("SnapshotWorkspace: %v", err)
	}
	if _, ok := before.Files["keep.txt"]; !ok || !before.Complete {
		t.Fatalf("before = %+v", before)
	}
	if _, ok := before.Files[".git/HEAD"]; ok {
		t.Errorf(".git is in the snapshot: %+v", before)
	}
	s.runOK(t, l, WriteFile, path.Join(wd, "new.txt"), "created by a process")
	s.runOK(t, l, WriteFile, path.Join(wd, "edit.txt"), "edited by a process")
	after, err := l.SnapshotWorkspace(t.Context(), 100)
	if err != nil {
		t.Fatalf("SnapshotWorkspace: %v", err)
	}
	if _, ok := after.Files["new.txt"]; !ok {
		t.Errorf("new.txt is missing: %+v", after)
	}
	if after.Files["edit.txt"] == before.Files["edit.txt"] {
		t.Errorf("edit.txt looks unchanged: %+v", after.Files["edit.txt"])
	}
	if after.Files["keep.txt"] != before.Files["keep.txt"] {
		t.Errorf("keep.txt changed: %+v -> %+v", before.Files["keep.txt"], after.Files["keep.txt"])
	}
	bounded, err := l.SnapshotWorkspace(t.Context(), 1)
	if err != nil || bounded.Complete || len(bounded.Files) != 1 || bounded.Last == "" {
		t.Errorf("bounded snapshot = %+v, %v", bounded, err)
	}
	closed := s.lease(t)
	closed.Close(t.Context())
	if _, err := closed.SnapshotWorkspace(t.Context(), 100); !errors.Is(err, sandbox.ErrClosed) || outpost.CodeOf(err) != outpost.Sandbox {
		t.Errorf("SnapshotWorkspace of a released lease: %v, want sandbox.ErrClosed with code sandbox", err)
	}
}

// testList (driver.Lister): the regular files under a directory, nested
// ones too, relative to it, links left out; a missing directory is
// fs.ErrNotExist.
func (s *suite) testList(t *testing.T) {
	l := s.lease(t)
	dir := path.Join(l.Home(), "listed")
	_, err := l.List(t.Context(), l.Home())
	unsupported(t, err, "List")
	if err := WriteFiles(t.Context(), l, dir, []tarsafe.File{
		{Name: "b.txt", Data: []byte("b")},
		{Name: "a/deep/c.txt", Data: []byte("c")},
		{Name: "link", Link: "b.txt"},
	}); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	got, err := l.List(t.Context(), dir)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a/deep/c.txt", "b.txt"}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if _, err := l.List(t.Context(), path.Join(l.Home(), "missing")); !errors.Is(err, fs.ErrNotExist) || outpost.CodeOf(err) != outpost.Sandbox {
		t.Errorf("List of a missing directory: %v, want fs.ErrNotExist with code sandbox", err)
	}
}

// testHostPath (driver.HostPather): a sandbox that shares the host's
// files sees a host path as itself; an isolated one that says it honored
// a mount shows the host's file at the place it gives.
func (s *suite) testHostPath(t *testing.T) {
	p := s.provider(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "seen.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := s.h.Options(t)
	opts.Mounts = append(opts.Mounts, driver.Mount{Source: src, Target: "/opt/outpost-conformance"})
	l, err := sandbox.Acquire(t.Context(), p, opts)
	if err != nil {
		t.Fatalf("Acquire with a mount: %v", err)
	}
	t.Cleanup(func() { l.Close(t.Context()) })
	host := filepath.Join(src, "seen.txt")
	at, ok := l.HostPath(host)
	if !l.Isolated() && (!ok || at != host) {
		t.Errorf("HostPath(%s) in a sandbox sharing the host's files = %q, %v", host, at, ok)
	}
	if !ok {
		t.Skipf("the %s sandbox did not honor the mount", p.Name())
	}
	if got := string(s.runOK(t, l, ReadFile, at).Stdout); got != "from the host" {
		t.Errorf("reading %s (host %s) gives %q", at, host, got)
	}
	if at, ok := l.HostPath(filepath.Join(t.TempDir(), "elsewhere")); l.Isolated() && ok {
		t.Errorf("HostPath outside every mount = %q, true", at)
	}
}

// testWarm (driver.Warmer): a warmed sandbox runs its processes as any
// other, several in a row (a launcher kept ready after each Start); a
// released lease refuses Warm.
func (s *suite) testWarm(t *testing.T) {
	l := s.lease(t)
	for i := range 3 {
		if err := l.Warm(t.Context()); err != nil {
			t.Fatalf("Warm %d: %v", i, err)
		}
		if got := string(s.runOK(t, l, Echo, "warm").Stdout); got != "warm\n" {
			t.Errorf("process %d after Warm printed %q", i, got)
		}
	}
	if _, ok := l.Sandbox().(driver.Warmer); !ok {
		return // Warm does nothing, on a released lease too
	}
	closed := s.lease(t)
	closed.Close(t.Context())
	if err := closed.Warm(t.Context()); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Warm of a released lease: %v, want sandbox.ErrClosed", err)
	}
}

// testVanished (driver.Vanisher): a live sandbox has not vanished; one
// removed behind outpost's back (Harness.Vanish) has, and a process
// started in it fails with code sandbox and details.vanished.
func (s *suite) testVanished(t *testing.T) {
	l, err := sandbox.Acquire(t.Context(), s.provider(t), s.h.Options(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	// Releasing a vanished sandbox may report what was lost with it.
	t.Cleanup(func() { l.Close(context.Background()) })
	if l.Vanished(t.Context()) {
		t.Fatal("a live sandbox reports it vanished")
	}
	if s.h.Vanish == nil {
		t.Skip("Harness.Vanish is nil: no way to remove a sandbox behind outpost's back")
	}
	if _, ok := l.Sandbox().(driver.Vanisher); !ok {
		t.Fatalf("Harness.Vanish is set but %T does not implement driver.Vanisher", l.Sandbox())
	}
	s.h.Vanish(t, l)
	if !l.Vanished(t.Context()) {
		t.Fatal("a sandbox removed behind outpost's back does not report it vanished")
	}
	_, err = l.Exec(t.Context(), s.req(l, Echo, "x"), 1<<10)
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Sandbox || oe.Details["vanished"] != true {
		t.Errorf("Exec in a vanished sandbox: %#v, want code sandbox with details.vanished", err)
	}
}

// testDegraded (driver.Degrader): a sandbox whose processes ran as its
// provider designed reports no fallback. A provider that silently fell
// back to a slower way (an init that does not serve) fails here.
func (s *suite) testDegraded(t *testing.T) {
	l := s.acquire(t, s.provider(t))
	if _, ok := l.Sandbox().(driver.Degrader); !ok {
		t.Skipf("%T does not implement driver.Degrader", l.Sandbox())
	}
	if _, err := l.Exec(t.Context(), s.req(l, Echo, "x"), 1<<10); err != nil {
		t.Fatal(err)
	}
	if err := l.Degraded(); err != nil {
		t.Errorf("Degraded after a process ran: %v", err)
	}
}

// testCollect (driver.Collector, through sandbox.Collect): the sweep that
// `outpost gc` runs never removes a live sandbox of this process; a dry
// run removes nothing, even with All.
func (s *suite) testCollect(t *testing.T) {
	p := s.provider(t)
	l := s.acquire(t, p)
	col, err := sandbox.Collect(t.Context(), p, driver.CollectOptions{All: true, DryRun: true})
	if errors.Is(err, errors.ErrUnsupported) {
		if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), p.Name()) {
			t.Errorf("Collect on a provider without it: %v, want code configuration naming %s", err, p.Name())
		}
		t.Skipf("the %s provider cannot collect: %v", p.Name(), err)
	}
	if err != nil {
		t.Fatalf("Collect (all, dry run): %v", err)
	}
	for _, o := range col.Orphans {
		if o.Removed {
			t.Errorf("a dry run removed %+v", o)
		}
	}
	if col.Where == "" {
		t.Errorf("Collect says nothing of where it swept: %+v", col)
	}
	s.runOK(t, l, Echo, "after a dry run")
	if _, err := sandbox.Collect(t.Context(), p, driver.CollectOptions{}); err != nil {
		t.Logf("Collect: %v (another owner's leftovers may fail to go)", err)
	}
	if got := string(s.runOK(t, l, Echo, "alive").Stdout); got != "alive\n" {
		t.Errorf("the live lease printed %q after a sweep", got)
	}
}
