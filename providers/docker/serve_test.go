package docker_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestServedLease checks that a lease that is not warmed starts its
// processes, its helpers and its copies out through the container's init,
// with no exec of the engine at all, and that what they do is what an
// exec did: the parent is the exec shim, the environment exact, statuses
// and signals right.
func TestServedLease(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	dir := workdir(t)
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory the user may not write into: the init's setup still
	// writes its file (its mode comes last, and the init has no
	// capability to write into what it does not own).
	if err := os.MkdirAll(filepath.Join(dir, "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ro", "g.txt"), []byte("g\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	l := lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{Workdir: dir})
	sb := l.Sandbox().(*docker.Sandbox)
	if !docker.Serving(sb) {
		t.Fatal("the container's init does not serve")
	}
	if err := sb.Degraded(); err != nil {
		t.Errorf("Degraded of a serving lease: %v", err)
	}
	// The init laid the sandbox out: no archive went in through the
	// engine, and the init (PID 1) is now the user with no capability.
	if !docker.SetUp(sb) || docker.Puts(sb) != 0 {
		t.Errorf("set up by the init %v, %d archives copied in (want none)", docker.SetUp(sb), docker.Puts(sb))
	}
	env := fullEnv(l)
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `grep -E '^(Uid|Gid|Groups|CapPrm|CapEff):' /proc/1/status /proc/self/status | sed 's/^[^:]*://' | tr '\t' ' '; stat -c '%u:%g %a %n' /outpost/home /outpost/run /workspace /workspace/f.txt /workspace/ro /workspace/ro/g.txt; cat ro/g.txt`}, Env: map[string]string{"PATH": env["PATH"]}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ids := "Uid: 1000 1000 1000 1000\nGid: 1000 1000 1000 1000\nGroups:  \nCapPrm: 0000000000000000\nCapEff: 0000000000000000\n"
	want := ids + ids + "1000:1000 700 /outpost/home\n1000:1000 700 /outpost/run\n1000:1000 755 /workspace\n1000:1000 644 /workspace/f.txt\n1000:1000 500 /workspace/ro\n1000:1000 600 /workspace/ro/g.txt\ng\n"
	if string(res.Stdout) != want || res.Status.Code != 0 {
		t.Errorf("ids and layout:\n%s\nstderr %q, status %+v; want\n%s", res.Stdout, res.Stderr, res.Status, want)
	}

	res, err = l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `tr '\0' ' ' </proc/$PPID/cmdline; echo; echo "$ONLY"; echo err >&2; echo changed > f.txt; exit 5`}, Env: map[string]string{"PATH": env["PATH"], "ONLY": "this"}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(res.Stdout), "\n")
	if !strings.Contains(lines[0], "sandbox-shim exec --spec-stdin --token=") || lines[1] != "this" || string(res.Stderr) != "err\n" || res.Status.Code != 5 {
		t.Errorf("stdout %q, stderr %q, status %+v", res.Stdout, res.Stderr, res.Status)
	}

	// A signal, through the init too.
	pr, err := l.Start(t.Context(), driver.ExecRequest{Path: "sleep", Args: []string{"60"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr.Stdout())
	go io.Copy(io.Discard, pr.Stderr())
	if err := pr.Signal(driver.Terminate); err != nil {
		t.Fatal(err)
	}
	st, err := pr.Wait()
	if err != nil || st.Signal != "terminated" {
		t.Errorf("a terminated sleep: %+v, %v", st, err)
	}

	snap, err := sb.SnapshotWorkspace(t.Context(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Files["f.txt"]; !ok {
		t.Errorf("snapshot %v has no f.txt", snap.Files)
	}
	rc, err := l.CopyOut(t.Context(), layout.Workspace+"/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tr)
	rc.Close()
	if string(b) != "changed\n" {
		t.Errorf("copied out %q", b)
	}
	if _, err := l.CopyOut(t.Context(), layout.Workspace+"/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("copying a missing file out: %v, want not-exist", err)
	}
	if p, err := sb.LookPath(t.Context(), "sleep", env["PATH"]); err != nil || !strings.HasSuffix(p, "/sleep") {
		t.Errorf("LookPath: %q, %v", p, err)
	}
	if n := docker.Execs(sb); n != 0 {
		t.Errorf("%d execs made, want none", n)
	}

	// The release copies the change back and removes the container.
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != "changed\n" {
		t.Errorf("host's f.txt %q after release", b)
	}
	// The copy back was the shim's tar, not the engine's archive endpoint.
	if n := docker.ServedCopies(sb); n != 1 {
		t.Errorf("%d copies back through the init, want 1", n)
	}
}

// TestCopyBackNotWhole: a workspace the sandbox's user cannot archive
// whole (a file the agent made unreadable, a fifo) is copied back by the
// engine's archive endpoint, as root: nothing is lost, nothing is taken
// for deleted.
func TestCopyBackNotWhole(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	dir := workdir(t)
	for _, name := range []string{"keep.txt", "gone.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{Workdir: dir})
	sb := l.Sandbox().(*docker.Sandbox)
	env := fullEnv(l)
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `echo secret > locked.txt && chmod 000 locked.txt && echo new > new.txt && rm gone.txt`}, Env: map[string]string{"PATH": env["PATH"]}}, 1<<20)
	if err != nil || res.Status.Code != 0 {
		t.Fatalf("%v: %s %+v", err, res.Stderr, res.Status)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"keep.txt": "keep.txt\n", "new.txt": "new\n", "locked.txt": "secret\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("host's %s: %q, %v", name, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone.txt, deleted in the sandbox: %v", err)
	}
	if n := docker.ServedCopies(sb); n != 0 {
		t.Errorf("%d copies back through the init, want none (the user cannot read locked.txt)", n)
	}
}

// TestServedReleaseStopsRunning: a release while a served process runs
// stops it (its status is the release's SIGKILL) and still copies back.
func TestServedReleaseStopsRunning(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	dir := workdir(t)
	p := dockertest.Provider(t, dockertest.Busybox)
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "echo x > new.txt; echo up; exec sleep 600"}, Env: fullEnv(l)})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr.Stderr())
	buf := make([]byte, 3)
	if _, err := io.ReadFull(pr.Stdout(), buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		st, err := pr.Wait()
		if err == nil && st.Signal != "killed" {
			err = fmt.Errorf("status %+v, want killed", st)
		}
		done <- err
	}()
	// The lease waits for its running process as long as ctx lets it.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the running process after the release: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait did not return after the release")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "x\n" {
		t.Errorf("new.txt %q after the release", b)
	}
}

// TestConformanceExec runs the conformance suite with every process an
// exec of the engine: the path a container whose init does not serve
// falls back to (a `binary` of an older outpost). Copy mode only.
func TestConformanceExec(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = docker.Copy })
			docker.ServeOff(p)
			return p
		},
		Options: func(t *testing.T) driver.Options { return driver.Options{Workdir: workdir(t)} },
	})
}
