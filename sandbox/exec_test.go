package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// TestWaitKeepsABusyConsumersOutput: a process exited while its
// consumer was still busy with what it read (a slow caller of a big
// answer). Wait waits for the consumer however long it takes, and the
// output the process wrote last is read, not cut (the drain limit counts
// only a consumer's waiting for output that does not come).
func TestWaitKeepsABusyConsumersOutput(t *testing.T) {
	const limit = 50 * time.Millisecond
	defer sandbox.SetDrainLimit(limit)()
	read := make(chan struct{})
	p := memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{
		"answer": func(ctx context.Context, p *memsandbox.Proc) int {
			io.WriteString(p.Stdout, "first\n")
			<-read // the consumer has the first line: the rest waits in the stream
			io.WriteString(p.Stdout, "last\n")
			return 0
		},
	}})
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	var got strings.Builder
	j, err := l.Launch(t.Context(), driver.ExecRequest{Path: "answer", Env: l.Environment().Fixed}, &sandbox.JobOptions{Stdout: func(r io.Reader) {
		first := make([]byte, len("first\n"))
		io.ReadFull(r, first)
		got.Write(first)
		close(read)
		time.Sleep(5 * limit) // busy past the limit, the process gone: not a reason to cut
		rest, _ := io.ReadAll(r)
		got.Write(rest)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := j.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	if got.String() != "first\nlast\n" {
		t.Errorf("the consumer read %q, want both lines: the output written before the exit was cut", got.String())
	}
}

// TestWaitClosesStreamsADescendantHolds: a descendant that left the
// process's group keeps its output open; once the consumers waited the
// drain limit for output that does not come, Wait closes the streams and
// returns with what was written.
func TestWaitClosesStreamsADescendantHolds(t *testing.T) {
	out := runWithDescendant(t, "setsid sleep 3600 & echo pid=$!; sleep 0.1")
	if out != fmt.Sprintf("pid=%s\n", strings.TrimPrefix(strings.TrimSpace(out), "pid=")) {
		t.Errorf("stdout %q, want the descendant's pid alone", out)
	}
}

// TestWaitCutsATricklingDescendant: a descendant that left the group and
// writes a line now and then keeps the consumer from ever waiting the
// drain limit in one read; the drain ceiling ends the wait all the same,
// with the process's own output read.
func TestWaitCutsATricklingDescendant(t *testing.T) {
	out := runWithDescendant(t, "setsid sh -c 'while :; do echo t; sleep 0.05; done' & echo pid=$!; sleep 0.3") // ceiling 1.2 s
	if n := strings.Count(out, "t\n"); n < 10 {
		t.Errorf("%d lines of the descendant read, want the drain to have lasted past the limit (stdout %q)", n, out)
	}
}

// runWithDescendant runs script (which starts a descendant out of its
// group and prints "pid=PID") on a local lease with a drain limit of
// 200 ms, checks that Wait returns with exit 0, kills the descendant and
// returns the output.
func runWithDescendant(t *testing.T, script string) string {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	defer sandbox.SetDrainLimit(200 * time.Millisecond)()
	p := local.New(&local.Options{BaseDir: t.TempDir(), Isolation: "none"})
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	var out []byte
	j, err := l.Launch(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: l.Environment().Fixed},
		&sandbox.JobOptions{Stdout: func(r io.Reader) { out, _ = io.ReadAll(r) }})
	if err != nil {
		t.Fatal(err)
	}
	st, werr := j.Wait()
	_, rest, _ := strings.Cut(string(out), "pid=")
	first, _, _ := strings.Cut(rest, "\n")
	if pid, err := strconv.Atoi(first); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
	} else {
		t.Errorf("stdout %q, want the descendant's pid", out)
	}
	if werr != nil || st.Code != 0 {
		t.Fatalf("Wait: %+v, %v", st, werr)
	}
	return string(out)
}
