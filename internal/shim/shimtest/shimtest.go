// Package shimtest is the behaviour every provider that runs programs
// under the exec shim (shim.Process) must show, as one table: exit codes,
// deaths by signal, Signal, a start cut short by its context, the
// handshake's errors, Close and Wait. Each provider's tests call Run with
// a Harness over its own sandbox; Local runs the shim as a child of the
// test binary, for the table at the unit level.
package shimtest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
)

// Process is what a provider's Start returns, without the driver's types.
type Process interface {
	Stdout() io.Reader
	Stderr() io.Reader
	Wait() (harness.ExitStatus, error)
	Close() error
}

// Harness runs programs in one sandbox of a provider.
type Harness struct {
	// Start starts path with args in dir ("" = the sandbox's working
	// directory), with an environment that has a PATH.
	Start func(ctx context.Context, path string, args []string, dir string) (Process, error)
	// Signal sends SIGTERM, or SIGKILL when kill is set, to p's group.
	Signal func(p Process, kill bool) error
	// Shell is a POSIX shell in the sandbox; Dir a writable directory.
	Shell, Dir string
}

var (
	terminated = harness.ExitStatus{Code: -1, Signal: syscall.SIGTERM.String()}
	killed     = harness.ExitStatus{Code: -1, Signal: syscall.SIGKILL.String()}
)

// Run runs the table against h.
func Run(t *testing.T, h Harness) {
	exits := []struct {
		name, script string
		want         harness.ExitStatus
	}{
		{"exit code", "exit 3", harness.ExitStatus{Code: 3}},
		{"exit 137 is no signal", "exit 137", harness.ExitStatus{Code: 137}},
		{"killed by TERM", "kill -TERM $$", terminated},
		{"killed by KILL", "kill -KILL $$", killed},
	}
	for _, tt := range exits {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, h, tt.script)
			_, _ = io.Copy(io.Discard, p.Stdout())
			wait(t, p, tt.want)
		})
	}
	for _, kill := range []bool{false, true} {
		want := map[bool]harness.ExitStatus{false: terminated, true: killed}[kill]
		t.Run("Signal "+want.Signal, func(t *testing.T) {
			p := start(t, h, "echo started; sleep 3600 & wait")
			started(t, p)
			if err := h.Signal(p, kill); err != nil {
				t.Fatalf("Signal: %v", err)
			}
			wait(t, p, want)
			if err := h.Signal(p, kill); err != nil {
				t.Errorf("Signal after Wait: %v", err)
			}
		})
	}
	t.Run("Wait twice", func(t *testing.T) {
		p := start(t, h, "exit 7")
		_, _ = io.Copy(io.Discard, p.Stdout())
		wait(t, p, harness.ExitStatus{Code: 7})
		wait(t, p, harness.ExitStatus{Code: 7})
	})
	t.Run("Close after the output, then Wait", func(t *testing.T) {
		p := start(t, h, "echo out; exit 5")
		_, _ = io.Copy(io.Discard, p.Stdout())
		p.Close()
		wait(t, p, harness.ExitStatus{Code: 5})
	})
	t.Run("Close while running, then Signal and Wait", func(t *testing.T) {
		p := start(t, h, "echo started; sleep 3600 & wait")
		started(t, p)
		p.Close()
		if _, err := p.Stdout().Read(make([]byte, 1)); err == nil {
			t.Error("Read after Close: no error")
		}
		if err := h.Signal(p, true); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		wait(t, p, killed)
	})
	runStartErrors(t, h)
	runCancel(t, h)
}

// runStartErrors: the handshake's errors are the same everywhere.
func runStartErrors(t *testing.T, h Harness) {
	notExec := strings.TrimSuffix(h.Dir, "/") + "/outpost-not-executable"
	p := start(t, h, "printf 'echo hi\n' > "+notExec+" && chmod 644 "+notExec)
	wait(t, p, harness.ExitStatus{})
	for _, tt := range []struct {
		name, path, dir string
		is              []error
	}{
		{"program not found", "/nonexistent/outpost-program", "", []error{exec.ErrNotFound}},
		{"program not executable", notExec, "", []error{exec.ErrNotFound}},
		{"missing working directory", h.Shell, "/nonexistent/outpost-dir", []error{shim.ErrNoDir, fs.ErrNotExist}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := h.Start(t.Context(), tt.path, []string{"-c", "exit 0"}, tt.dir)
			if err == nil {
				p.Close()
				_, _ = p.Wait()
				t.Fatal("Start: no error")
			}
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("Start: %v, not %v", err, target)
				}
			}
			var ee *exec.Error
			if errors.Is(err, exec.ErrNotFound) && (!errors.As(err, &ee) || ee.Name != tt.path) {
				t.Errorf("Start: %v, not an *exec.Error naming %s", err, tt.path)
			}
		})
	}
}

// runCancel: a start cut short by its context leaves nothing running, at
// whatever point of the start the context ends.
func runCancel(t *testing.T, h Harness) {
	t.Run("cancel kills the group", func(t *testing.T) {
		marker := "outpost-cancel-" + shim.Token()
		// The program and a child of its group carry the marker as $0.
		script := `"$1" -c 'sleep 3600; :' "$0" & wait`
		for i, d := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
			ctx, cancel := context.WithTimeout(t.Context(), d)
			if d == 0 {
				cancel()
			}
			p, err := h.Start(ctx, h.Shell, []string{"-c", script, marker, h.Shell}, "")
			cancel()
			if err == nil {
				if err := h.Signal(p, true); err != nil {
					t.Fatalf("Signal: %v", err)
				}
				p.Close()
				_, _ = p.Wait()
				continue
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("attempt %d: Start: %v, not the context's error", i, err)
			}
		}
		// Every attempt that failed is killed; none survives. The kills
		// run in the background, each after its handshake, and one lost
		// is tried again: wait for as long as a kill may take, twice.
		check := `grep -qs "$0$1" /proc/[0-9]*/cmdline && exit 1; exit 0`
		half := len(marker) / 2
		for deadline := time.Now().Add(2 * shim.SignalTimeout); ; {
			p := startArgs(t, h, []string{"-c", check, marker[:half], marker[half:]})
			_, _ = io.Copy(io.Discard, p.Stdout())
			st, err := p.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if st.Success() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("a process of a cancelled start still runs")
			}
			time.Sleep(100 * time.Millisecond) // polling the sandbox's processes
		}
	})
}

func start(t *testing.T, h Harness, script string) Process {
	t.Helper()
	return startArgs(t, h, []string{"-c", script})
}

func startArgs(t *testing.T, h Harness, args []string) Process {
	t.Helper()
	p, err := h.Start(t.Context(), h.Shell, args, "")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		_ = h.Signal(p, true)
		p.Close()
		_, _ = p.Wait()
	})
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	return p
}

// started reads the program's first line, "started".
func started(t *testing.T, p Process) {
	t.Helper()
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
}

func wait(t *testing.T, p Process, want harness.ExitStatus) {
	t.Helper()
	got, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Wait (-want +got):\n%s", diff)
	}
}
