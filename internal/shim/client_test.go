package shim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/shim/shimtest"
)

// TestProcess runs the providers' table over a shim that is a child of
// the test binary.
func TestProcess(t *testing.T) {
	shimtest.Run(t, shimtest.Local(t, "OUTPOST_SHIM_TEST_CHILD=1"))
}

// shimChild is an exec of the shim, a child of the test binary, that runs
// script with sh in dir, and its Exec for shim.NewProcess.
func shimChild(t *testing.T, dir, script string) (shim.Exec, *exec.Cmd) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run, token := t.TempDir(), shim.Token()
	cmd := exec.Command(bin, shim.RemoteExecArgs(bin, token, run, dir, false, "sh", []string{"-c", script})[1:]...)
	cmd.Stdin = bytes.NewReader(shim.EnvLine(map[string]string{"PATH": os.Getenv("PATH")}))
	cmd.Env = append(os.Environ(), "OUTPOST_SHIM_TEST_CHILD=1")
	return shim.Exec{Name: "local", Binary: bin, RunDir: run, Token: token, Path: "sh"}, cmd
}

// TestAwaitCancelled: a start whose context ends before the handshake
// kills the program and its group once the shim says it runs.
func TestAwaitCancelled(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	x, cmd := shimChild(t, dir, `sleep 3600 & echo $$ $! > `+pids+`; wait`)
	hold := make(chan struct{})
	p := shim.NewProcess(x, &shimtest.Child{Cmd: cmd, Hold: hold})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Await(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await: %v, want %v", err, context.Canceled)
	}
	close(hold) // the shim starts only now
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if want := (harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}); st != want {
		t.Errorf("Wait: %+v, want %+v", st, want)
	}
	b, _ := os.ReadFile(pids) // none when the kill came first
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		// The group is killed before the shim exits: only a zombie may be
		// left of it, until it is reaped.
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
			t.Errorf("process %d of the group still runs: %s", pid, st)
		}
	}
}

// lossyChild is a Child transport whose first lost runs (the signal
// mode's execs) fail, as an exec lost under load does.
type lossyChild struct {
	*shimtest.Child
	lost, runs atomic.Int32
}

func (c *lossyChild) Run(ctx context.Context, args []string) (int, []byte, error) {
	if c.runs.Add(1) <= c.lost.Load() {
		return 0, nil, errors.New("the exec was lost")
	}
	return c.Child.Run(ctx, args)
}

// TestAwaitCancelledKillRetried: when the kill of a start cut short
// fails, it is tried again until the program has ended.
func TestAwaitCancelledKillRetried(t *testing.T) {
	x, cmd := shimChild(t, t.TempDir(), `sleep 3600 & wait`)
	hold := make(chan struct{})
	c := &lossyChild{Child: &shimtest.Child{Cmd: cmd, Hold: hold}}
	c.lost.Store(2)
	p := shim.NewProcess(x, c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Await(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await: %v, want %v", err, context.Canceled)
	}
	close(hold)
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if want := (harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}); st != want {
		t.Errorf("Wait: %+v, want %+v", st, want)
	}
	if n := c.runs.Load(); n != 3 {
		t.Errorf("%d kills, want 3 (two lost)", n)
	}
}

// unsyncedWriter is a stdin like an SSH session's: its Write and Close
// share a flag with no lock, so the race detector sees any overlap.
type unsyncedWriter struct {
	eof    bool
	closes int
	block  chan struct{} // a Write waits on it when not nil,
	in     chan struct{} // having said so here
}

func (w *unsyncedWriter) Write(b []byte) (int, error) {
	if w.block != nil {
		w.in <- struct{}{}
		<-w.block
	}
	if w.eof {
		return 0, errors.New("write after EOF")
	}
	return len(b), nil
}

func (w *unsyncedWriter) Close() error { w.eof = true; w.closes++; return nil }

// idleTransport streams nothing until it is closed.
type idleTransport struct{ done chan struct{} }

func (t *idleTransport) Stream(io.Writer, io.Writer) error { <-t.done; return nil }
func (t *idleTransport) Exit() (harness.ExitStatus, error) { return harness.ExitStatus{}, nil }
func (t *idleTransport) StartFailed(err, _ error) error    { return err }
func (t *idleTransport) Run(context.Context, []string) (int, []byte, error) {
	return 0, nil, nil
}
func (t *idleTransport) ReadStatus(context.Context, string) ([]byte, error) { return nil, nil }
func (t *idleTransport) Releasing() bool                                    { return false }
func (t *idleTransport) Close() {
	select {
	case <-t.done:
	default:
		close(t.done)
	}
}

// TestStdinCloseRace: a caller writing and closing stdin in a goroutine
// of its own while the Process closes (the tunnel's client in the
// conformance suite) never overlaps the transport's writer, which is
// closed once; a Close while a Write is blocked does not wait for it.
func TestStdinCloseRace(t *testing.T) {
	for range 50 {
		w := &unsyncedWriter{}
		p := shim.NewProcess(shim.Exec{Name: "test", Stdin: w}, &idleTransport{done: make(chan struct{})})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = p.Stdin().Write([]byte("msg"))
			_ = p.Stdin().Close()
		}()
		_ = p.Close()
		<-done
		if w.closes != 1 {
			t.Fatalf("the writer was closed %d times, want 1", w.closes)
		}
		if _, err := p.Stdin().Write([]byte("more")); err == nil {
			t.Fatal("a Write after Close succeeded")
		}
	}

	w := &unsyncedWriter{block: make(chan struct{}), in: make(chan struct{})}
	p := shim.NewProcess(shim.Exec{Name: "test", Stdin: w}, &idleTransport{done: make(chan struct{})})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = p.Stdin().Write([]byte("msg"))
	}()
	<-w.in
	_ = p.Close() // returns although the Write holds the writer
	close(w.block)
	<-wrote
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if w.closes != 1 {
		t.Fatalf("the writer was closed %d times, want 1", w.closes)
	}
}

// lostTransport is a Child whose exec stream the test can lose, as a
// kubernetes exec's is when its connection breaks: Stream and Exit
// return an error while the shim and its program go on running.
type lostTransport struct {
	*shimtest.Child
	lost     chan struct{}
	streamed chan struct{}
}

func (t *lostTransport) Stream(stdout, stderr io.Writer) error {
	go func() {
		defer close(t.streamed)
		_ = t.Child.Stream(stdout, stderr)
	}()
	select {
	case <-t.lost:
		return errors.New("the exec stream broke")
	case <-t.streamed:
		return nil
	}
}

func (t *lostTransport) Exit() (harness.ExitStatus, error) {
	select {
	case <-t.lost:
		return harness.ExitStatus{Code: -1}, errors.New("the exec stream broke")
	default:
		return t.Child.Exit()
	}
}

// TestKillAfterLostStream: a Wait that lost the exec stream (an error)
// does not make Kill a no-op: the program may outlive its stream, and
// Kill stops it.
func TestKillAfterLostStream(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	x, cmd := shimChild(t, dir, `echo $$ > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; exec sleep 3600`)
	tr := &lostTransport{Child: &shimtest.Child{Cmd: cmd}, lost: make(chan struct{}), streamed: make(chan struct{})}
	p := shim.NewProcess(x, tr)
	var pid int
	t.Cleanup(func() {
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		<-tr.streamed
	})
	if err := p.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		select {
		case <-tr.streamed:
			t.Fatal("the program ended before the stream was lost")
		default:
		}
	}
	close(tr.lost)
	if _, err := p.Wait(); err == nil {
		t.Fatal("Wait after a lost stream: no error")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the program did not outlive its stream: %v", err)
	}
	if err := p.Kill(true); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select { // the shim exits once its group is killed
	case <-tr.streamed:
	case <-time.After(time.Minute): // a bound on a hang, not a timing
		t.Fatal("the program still runs a minute after Kill")
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("the program still runs after Kill: %s", st)
	}
}
