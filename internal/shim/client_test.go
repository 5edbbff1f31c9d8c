package shim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
