package kubernetes

import (
	"context"
	"strings"
	"testing"

	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// grandparent prints the command line of the exec shim's parent: the
// program's parent is the shim, the shim's is the serving exec
// (`outpost sandbox-shim serve`), or nothing of the container's when the
// shim is an exec of its own.
const grandparent = `gp=$(awk '/^PPid:/{print $2}' /proc/$PPID/status); echo "$gp"; [ "$gp" = 0 ] || tr '\0' ' ' </proc/$gp/cmdline`

// TestServedProcesses: a lease's processes are streams of one serving
// exec; with exec_each each is an exec of its own; a serving exec that
// dies takes the process on it down with it (an error, not a hang) and
// the next process starts a new one.
func TestServedProcesses(t *testing.T) {
	c := kubetest.Parallel(t)
	lease := func(t *testing.T, execEach bool) *sandbox.Lease { return busyboxLease(t, c, execEach) }
	exec := func(t *testing.T, l *sandbox.Lease, script string) (sandbox.ExecResult, error) {
		env := map[string]string{"PATH": l.Environment().Defaults["PATH"]}
		return l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env}, 1<<20)
	}
	run := func(t *testing.T, l *sandbox.Lease, script string) (string, error) {
		t.Helper()
		res, err := exec(t, l, script)
		if err == nil && !res.Status.Success() {
			t.Fatalf("%q: status %+v, stderr %q", script, res.Status, res.Stderr)
		}
		return string(res.Stdout), err
	}
	// serving returns the serving exec's pid, failing unless there is one.
	serving := func(t *testing.T, l *sandbox.Lease) string {
		t.Helper()
		out, err := run(t, l, grandparent)
		if err != nil {
			t.Fatal(err)
		}
		pid, cmdline, _ := strings.Cut(out, "\n")
		if !strings.Contains(cmdline, "sandbox-shim serve") {
			t.Fatalf("the exec shim's parent is %q (pid %s), not the serving exec", cmdline, pid)
		}
		return pid
	}

	t.Run("served", func(t *testing.T) {
		l := lease(t, false)
		first := serving(t, l)
		if again := serving(t, l); again != first {
			t.Errorf("two processes of one lease on serving execs %s and %s, want one", first, again)
		}
		// Kill the serving exec from a process on it: that process's
		// stream breaks with it.
		if res, err := exec(t, l, grandparent+` >/dev/null; kill -9 "$gp"; sleep 5`); err == nil {
			t.Errorf("a process whose serving exec was killed under it ended without an error: %+v", res.Status)
		} else {
			t.Logf("the process on the killed serving exec: %v", err)
		}
		if next := serving(t, l); next == first {
			t.Errorf("still on serving exec %s after it was killed", next)
		}
	})
	t.Run("exec_each", func(t *testing.T) {
		l := lease(t, true)
		out, err := run(t, l, grandparent)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "sandbox-shim serve") {
			t.Errorf("with exec_each the exec shim's parent is %q", out)
		}
	})
}

// busyboxLease is a lease on the busybox image, released when the test
// ends; execEach is Options.ExecEach.
func busyboxLease(t *testing.T, c *kubetest.Cluster, execEach bool) *sandbox.Lease {
	t.Helper()
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox; o.ExecEach = execEach })
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}
