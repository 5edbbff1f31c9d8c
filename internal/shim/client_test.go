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
	"syscall"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/shim/shimtest"
)

// TestProcess runs the providers' table over a shim that is a child of
// the test binary.
func TestProcess(t *testing.T) {
	shimtest.Run(t, shimtest.Local(t, "OUTPOST_SHIM_TEST_CHILD=1"))
}

// TestAwaitCancelled: a start whose context ends before the handshake
// kills the program and its group once the shim says it runs.
func TestAwaitCancelled(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run, dir := t.TempDir(), t.TempDir()
	pids := filepath.Join(dir, "pids")
	token := shim.Token()
	cmd := exec.Command(bin, shim.RemoteExecArgs(bin, token, run, dir, false, "sh", []string{"-c", `sleep 3600 & echo $$ $! > ` + pids + `; wait`})[1:]...)
	cmd.Stdin = bytes.NewReader(shim.EnvLine(map[string]string{"PATH": os.Getenv("PATH")}))
	cmd.Env = append(os.Environ(), "OUTPOST_SHIM_TEST_CHILD=1")
	hold := make(chan struct{})
	p := shim.NewProcess(shim.Exec{Name: "local", Binary: bin, RunDir: run, Token: token, Path: "sh"}, &shimtest.Child{Cmd: cmd, Hold: hold})
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
