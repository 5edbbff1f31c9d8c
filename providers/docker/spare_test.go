package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// warmProvider warms every sandbox it opens (driver.Warmer): each Start
// then goes to a spare exec.
type warmProvider struct{ driver.Provider }

func (w warmProvider) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	sb, err := w.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := sb.(driver.Warmer).Warm(ctx); err != nil {
		return nil, errors.Join(err, sb.Close(context.Background()))
	}
	return sb, nil
}

// TestConformanceWarm runs the conformance suite on warm sandboxes: every
// process of the suite is started by a spare. Copy mode only (the spare
// does not depend on the mode, and copy mode's release is the one that
// asks whether processes run); TestConformance covers both cold.
func TestConformanceWarm(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			return warmProvider{dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = docker.Copy })}
		},
		Options: func(t *testing.T) driver.Options { return driver.Options{Workdir: workdir(t)} },
	})
}

// warmLease is a warm lease on busybox, released when the test ends.
func warmLease(t *testing.T) (*sandbox.Lease, *docker.Sandbox) {
	t.Helper()
	l := lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{Workdir: workdir(t)})
	if err := l.Warm(t.Context()); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	return l, l.Sandbox().(*docker.Sandbox)
}

// fullEnv is the sandbox's whole environment.
func fullEnv(l *sandbox.Lease) map[string]string {
	env := map[string]string{}
	for k, v := range l.Environment().Defaults {
		env[k] = v
	}
	for k, v := range l.Environment().Fixed {
		env[k] = v
	}
	return env
}

// TestSpareProcesses: a process started by a spare exec behaves as one
// started by an exec of its own.
func TestSpareProcesses(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	l, sb := warmLease(t)
	env := fullEnv(l)
	runs := docker.SpareRuns(sb)
	// spared checks that the last n requests went to spares.
	spared := func(t *testing.T, n int64) {
		t.Helper()
		if got := docker.SpareRuns(sb); got != runs+n {
			t.Errorf("%d requests went to a spare, want %d", got-runs, n)
		}
		runs = docker.SpareRuns(sb)
	}
	exec1 := func(t *testing.T, req driver.ExecRequest) sandbox.ExecResult {
		t.Helper()
		res, err := l.Exec(t.Context(), req, 1<<20)
		if err != nil {
			t.Fatalf("%s %q: %v", req.Path, req.Args, err)
		}
		return res
	}

	t.Run("launched by a spare", func(t *testing.T) {
		res := exec1(t, driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `tr '\0' ' ' </proc/$PPID/cmdline`}, Env: env})
		if !strings.Contains(string(res.Stdout), "sandbox-shim exec --spec-stdin --token=") {
			t.Errorf("the program's parent is %q, not a spare shim", res.Stdout)
		}
		spared(t, 1)
	})
	t.Run("exact environment", func(t *testing.T) {
		want := map[string]string{"PATH": env["PATH"], "ONLY": "this one", "EMPTY": "", "QUOTE": `a"b\c`}
		res := exec1(t, driver.ExecRequest{Path: "env", Env: want})
		got := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
		slices.Sort(got)
		wantLines := []string{"EMPTY=", "ONLY=this one", "PATH=" + env["PATH"], `QUOTE=a"b\c`}
		if d := cmp.Diff(wantLines, got); d != "" {
			t.Errorf("environment (-want +got), the image's and the engine's variables must not leak:\n%s", d)
		}
		spared(t, 1)
	})
	t.Run("stdin", func(t *testing.T) {
		pr, err := l.Start(t.Context(), driver.ExecRequest{Path: "cat", Env: env, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		errc := make(chan error, 1)
		go func() {
			_, err := io.WriteString(pr.Stdin(), "through the spare\n")
			errc <- errors.Join(err, pr.Stdin().Close())
		}()
		go io.Copy(io.Discard, pr.Stderr())
		out, _ := io.ReadAll(pr.Stdout())
		if err := <-errc; err != nil {
			t.Errorf("writing stdin: %v", err)
		}
		st, err := pr.Wait()
		if string(out) != "through the spare\n" || !st.Success() || err != nil {
			t.Errorf("output %q, status %+v, %v", out, st, err)
		}
		spared(t, 1)
	})
	t.Run("no stdin", func(t *testing.T) {
		res := exec1(t, driver.ExecRequest{Path: "cat", Env: env})
		if len(res.Stdout) != 0 || !res.Status.Success() {
			t.Errorf("cat without stdin: %q, %+v", res.Stdout, res.Status)
		}
		spared(t, 1)
	})
	t.Run("exit statuses", func(t *testing.T) {
		cases := map[string]harness.ExitStatus{
			"exit 0":        {Code: 0},
			"exit 3":        {Code: 3},
			"exit 137":      {Code: 137},
			"kill -TERM $$": {Code: -1, Signal: "terminated"},
			"kill -KILL $$": {Code: -1, Signal: "killed"},
		}
		for script, want := range cases {
			if got := shStatus(t, l, script).Status; got != want {
				t.Errorf("%q: status %+v, want %+v", script, got, want)
			}
		}
		spared(t, int64(len(cases)))
	})
	t.Run("terminate the group", func(t *testing.T) {
		// The shell says "started" only once its child has dropped the
		// inherited trap (SigCgt no longer has SIGTERM, bit 14): a SIGTERM
		// that reaches the forked child before ash resets its signals runs
		// the trap's handler there and is lost at the exec, so sleep would
		// run to its end (seen on a loaded CI machine; 44 of 300 tries on
		// one busy core without this wait).
		script := `trap 'echo trapped' TERM; sleep 600 & ` +
			`until [ $(( 0x$(awk '/^SigCgt/{print $2}' /proc/$!/status) & 0x4000 )) = 0 ]; do :; done; ` +
			`echo started; wait $!; wait $!; echo "sleep ended $?"`
		pr, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		go io.Copy(io.Discard, pr.Stderr())
		buf := make([]byte, len("started\n"))
		if _, err := io.ReadFull(pr.Stdout(), buf); err != nil || string(buf) != "started\n" {
			t.Fatalf("first line %q, %v", buf, err)
		}
		if err := pr.Signal(driver.Terminate); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		rest, _ := io.ReadAll(pr.Stdout())
		st, err := pr.Wait()
		if err != nil || !st.Success() {
			t.Errorf("status %+v, %v", st, err)
		}
		// Both the shell and its background child got SIGTERM.
		if string(rest) != "trapped\nsleep ended 143\n" {
			t.Errorf("output after the signal %q, want the trap and the child's death by SIGTERM", rest)
		}
		spared(t, 1)
	})
	t.Run("not found", func(t *testing.T) {
		_, err := l.Start(t.Context(), driver.ExecRequest{Path: "no-such-program", Env: env})
		if !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("Start of a missing program: %v, want exec.ErrNotFound", err)
		}
		spared(t, 1)
	})
	t.Run("missing directory", func(t *testing.T) {
		_, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/true", Env: env, Dir: "/no/such/dir"})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Start in a missing directory: %v, want fs.ErrNotExist", err)
		}
		spared(t, 1)
	})
	t.Run("invalid variable", func(t *testing.T) {
		_, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/true", Env: map[string]string{"A": "x\x00y"}})
		if err == nil || strings.Contains(err.Error(), "x\x00y") {
			t.Errorf("Start with a NUL in a value: %v", err)
		}
		spared(t, 0) // refused before a spare is taken
	})
}

// TestSpareVanished: a container removed or stopped while its spare waits
// fails the next Start with ErrVanished (code sandbox, details.vanished),
// as an ordinary exec would.
func TestSpareVanished(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	cli := dockertest.Client(t)
	for _, how := range []string{"removed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = docker.Bind })
			l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: workdir(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close(context.Background())
			if err := l.Warm(t.Context()); err != nil {
				t.Fatal(err)
			}
			cid := l.Sandbox().(*docker.Sandbox).ContainerID()
			if how == "removed" {
				err = cli.ContainerRemove(t.Context(), cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
			} else {
				err = cli.ContainerKill(t.Context(), cid, "KILL")
				if err == nil {
					wait, errc := cli.ContainerWait(t.Context(), cid, container.WaitConditionNotRunning)
					select {
					case <-wait:
					case err = <-errc:
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 { // the spare, then the one made after it
				_, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/true", Env: fullEnv(l)})
				var oe *outpost.Error
				if !errors.Is(err, driver.ErrVanished) || !errors.As(err, &oe) || oe.Code != outpost.Sandbox || oe.Details["vanished"] != true {
					t.Errorf("Start %d on a %s container: %v, want ErrVanished with code sandbox and details.vanished", i+1, how, err)
				}
			}
		})
	}
}

// spareGoroutines returns the stacks of goroutines that make or end
// spares, once there are none or after a minute.
func spareGoroutines() string {
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a measure
	for {
		buf := make([]byte, 4<<20)
		all := string(buf[:runtime.Stack(buf, true)])
		var left []string
		for _, g := range strings.Split(all, "\n\n") {
			if strings.Contains(g, "docker.(*Sandbox).makeSpareLocked") || strings.Contains(g, "docker.(*spare).discard") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spareShims lists the spare shims running in sb's container, once there
// are want of them or after a minute.
func spareShims(t *testing.T, sb *docker.Sandbox, want int) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a measure
	for {
		ps, err := docker.Processes(sb)
		if err != nil {
			t.Fatal(err)
		}
		var shims []string
		for _, line := range strings.Split(ps, "\n") {
			if strings.Contains(line, "--spec-stdin") {
				shims = append(shims, strings.TrimSpace(line))
			}
		}
		if len(shims) == want || time.Now().After(deadline) {
			return shims
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSpareClose: a waiting spare is no process of the lease; dropping
// it ends its shim, and Close leaves no goroutine behind, in copy mode
// after copying back what a spare's process wrote.
func TestSpareClose(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	t.Run("waiting", func(t *testing.T) {
		wd := workdir(t)
		l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: wd})
		if err != nil {
			t.Fatal(err)
		}
		sb := l.Sandbox().(*docker.Sandbox)
		if err := l.Warm(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := shStatus(t, l, "echo written > "+layout.Workspace+"/by-spare").Status; !got.Success() {
			t.Fatalf("status %+v", got)
		}
		if err := l.Warm(t.Context()); err != nil { // tops the spares up again
			t.Fatal(err)
		}
		if shims := spareShims(t, sb, docker.DefaultSpares); len(shims) != docker.DefaultSpares {
			t.Fatalf("spare shims %q, want %d waiting", shims, docker.DefaultSpares)
		}
		docker.DropSpare(sb)
		if shims := spareShims(t, sb, 0); len(shims) != 0 {
			t.Errorf("spare shims %q left after the spare was dropped", shims)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(wd, "by-spare")); err != nil || string(b) != "written\n" {
			t.Errorf("copied back: %q, %v", b, err)
		}
		if left := spareGoroutines(); left != "" {
			t.Errorf("goroutines left:\n%s", left)
		}
	})
	t.Run("being made", func(t *testing.T) {
		l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: workdir(t)})
		if err != nil {
			t.Fatal(err)
		}
		warmed := make(chan error, 1)
		go func() { warmed <- l.Sandbox().(driver.Warmer).Warm(context.Background()) }()
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-warmed // a spare made or refused: either way Close ended it
		if left := spareGoroutines(); left != "" {
			t.Errorf("goroutines left:\n%s", left)
		}
		if err := l.Sandbox().(driver.Warmer).Warm(t.Context()); err == nil {
			t.Error("Warm after Close succeeded")
		}
	})
}

// TestSpareHelpers: on a warm sandbox, the workspace snapshot and copies
// out go to spares, which run the shim's mode in their own process; they
// are no processes of the lease, and taking the last spare for one makes
// no new spare. Without a spare they fall back to an exec and the
// archive endpoint, with the same answers.
func TestSpareHelpers(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	l, sb := warmLease(t)
	if shims := spareShims(t, sb, docker.DefaultSpares); len(shims) != docker.DefaultSpares {
		t.Fatalf("spare shims %q after Warm, want %d", shims, docker.DefaultSpares)
	}
	if got := shStatus(t, l, "mkdir -p "+layout.Workspace+"/d && echo one > "+layout.Workspace+"/d/a && echo two > "+layout.Workspace+"/d/b").Status; !got.Success() {
		t.Fatalf("status %+v", got)
	}
	runs := docker.SpareRuns(sb)
	check := func(t *testing.T, spared bool) {
		t.Helper()
		snap, err := sb.SnapshotWorkspace(t.Context(), 100)
		if err != nil {
			t.Fatalf("SnapshotWorkspace: %v", err)
		}
		if _, ok := snap.Files["d/a"]; !ok || len(snap.Files) != 2 {
			t.Errorf("snapshot %+v, want d/a and d/b", snap.Files)
		}
		rc, err := sb.CopyOut(t.Context(), layout.Workspace+"/d/a")
		if err != nil {
			t.Fatalf("CopyOut of a file: %v", err)
		}
		tr := tar.NewReader(rc)
		hd, err := tr.Next()
		if err != nil || hd.Name != "a" {
			t.Fatalf("first entry %+v, %v", hd, err)
		}
		if b, _ := io.ReadAll(tr); string(b) != "one\n" {
			t.Errorf("content %q", b)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Errorf("after the file: %v, want the end of the archive", err)
		}
		if err := rc.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := sb.CopyOut(t.Context(), layout.Workspace+"/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("CopyOut of a missing path: %v, want fs.ErrNotExist", err)
		}
		// Closed after its first entry: the rest is not read.
		rc, err = sb.CopyOut(t.Context(), layout.Workspace+"/d")
		if err != nil {
			t.Fatalf("CopyOut of a directory: %v", err)
		}
		if hd, err := tar.NewReader(rc).Next(); err != nil || strings.TrimSuffix(hd.Name, "/") != "d" || hd.Typeflag != tar.TypeDir {
			t.Errorf("first entry %+v, %v", hd, err)
		}
		rc.Close()
		want := runs
		if spared {
			want += 4
		}
		if got := docker.SpareRuns(sb); got != want {
			t.Errorf("%d helpers went to a spare, want %d", got-runs, want-runs)
		}
		runs = docker.SpareRuns(sb)
		if n := docker.Active(sb); n != 0 {
			t.Errorf("%d processes of the lease counted, want 0: a helper is none", n)
		}
	}
	// One spare was taken by the shell above; make it 4 again.
	if err := l.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Run("on spares", func(t *testing.T) { check(t, true) })
	if shims := spareShims(t, sb, 0); len(shims) != 0 {
		t.Errorf("spare shims %q: helpers took them all, and none should be made for them", shims)
	}
	t.Run("without spares", func(t *testing.T) { check(t, false) })
	if left := spareGoroutines(); left != "" {
		t.Errorf("goroutines left:\n%s", left)
	}
}

// TestSparesNone: Options.Spares < 0 keeps no spare: Warm does nothing.
func TestSparesNone(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Spares = -1 })
	l := lease(t, p, driver.Options{Workdir: workdir(t)})
	if err := l.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	sb := l.Sandbox().(*docker.Sandbox)
	if got := shStatus(t, l, "true").Status; !got.Success() || docker.SpareRuns(sb) != 0 {
		t.Errorf("status %+v, %d spare runs: want an exec", got, docker.SpareRuns(sb))
	}
	if shims := spareShims(t, sb, 0); len(shims) != 0 {
		t.Errorf("spare shims %q", shims)
	}
}

// TestCopyInThroughSpare: a warm sandbox copies into its home and its
// workspace through the shim's untar mode, without the engine's archive
// endpoint, and what it writes is the sandbox user's, as the engine's
// copy makes it; an unsafe archive is refused with tarsafe.ErrUnsafe (and
// writes nothing but dir); a directory the user does not own goes through
// the engine.
func TestCopyInThroughSpare(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	l, sb := warmLease(t)
	env := fullEnv(l)
	puts := docker.Puts(sb)
	files := []tarsafe.File{{Name: "a/b.txt", Data: []byte("through the spare"), Mode: 0o640}}
	for _, dir := range []string{path.Join(l.Home(), "new", "dir"), l.Workdir()} {
		if err := sandboxtest.WriteFiles(t.Context(), l, dir, files); err != nil {
			t.Fatalf("CopyIn %s: %v", dir, err)
		}
		res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `cat "$1"; stat -c ' %u %a' "$1" "$2"`, "sh", path.Join(dir, "a/b.txt"), dir}, Env: env}, 1<<20)
		if err != nil || res.Status.Code != 0 {
			t.Fatalf("reading back: %v %+v", err, res)
		}
		uid := docker.UID(sb)
		if want := fmt.Sprintf("through the spare %d 640\n %d ", uid, uid); !strings.HasPrefix(string(res.Stdout), want) {
			t.Errorf("%s: %q, want it to begin %q", dir, res.Stdout, want)
		}
	}
	if got := docker.Puts(sb); got != puts {
		t.Errorf("%d archives went through the engine, want none", got-puts)
	}
	var unsafe bytes.Buffer
	tw := tar.NewWriter(&unsafe)
	_ = tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o600})
	_ = tw.Close()
	refused := path.Join(l.Home(), "refused")
	if err := l.CopyIn(t.Context(), refused, &unsafe); !errors.Is(err, tarsafe.ErrUnsafe) {
		t.Errorf("an unsafe archive: %v, want ErrUnsafe", err)
	}
	if res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "ls", Args: []string{"-A", refused}, Env: env}, 1<<20); err != nil || res.Status.Code != 0 || len(res.Stdout) != 0 {
		t.Errorf("after a refused archive, dir holds %q (%v, %+v), want it made and empty", res.Stdout, err, res.Status)
	}
	if err := sandboxtest.WriteFiles(t.Context(), l, "/tmp/elsewhere", files); err != nil {
		t.Fatalf("CopyIn outside the home: %v", err)
	}
	if got := docker.Puts(sb); got != puts+1 {
		t.Errorf("%d archives went through the engine, want the one outside the home", got-puts)
	}
}
