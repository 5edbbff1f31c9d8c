package testenv

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// ProviderKinds are the providers the end-to-end tests run on.
var ProviderKinds = []string{"local", "docker"}

// EachProvider runs f as a parallel subtest per provider of ProviderKinds.
func EachProvider(t *testing.T, f func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range ProviderKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// OnLocal runs f as a parallel subtest on the local provider alone (named
// "local", as under EachProvider). It is for the tests whose subject does
// not depend on the sandbox: how a CLI's own report of a quota, an outage
// or a stall is classified, and how its structured answer is extracted or
// repaired. The engine reads the same bytes on every
// provider; that a CLI's output crosses a container unchanged is proven by
// the EachProvider tests of the same CLI (text, tools, resume and fork),
// and the docker provider's own failure paths (a stall, a timeout, a
// vanished container) by the echo agent's scenarios on docker. Running
// them twice cost a real CLI's start in a container per case and proved
// nothing more.
func OnLocal(t *testing.T, f func(t *testing.T, kind string)) {
	t.Parallel()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		f(t, "local")
	})
}

// RunOutpost runs the built outpost binary (OutpostBinary) in dir with a
// private OUTPOST_HOME and env added, and returns its exit code, standard
// output and standard error.
func RunOutpost(t *testing.T, home, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(OutpostBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "OUTPOST_HOME="+home), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// CopyFile copies src to dst (mode 0755).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// LockedBuffer is a bytes.Buffer safe for concurrent writers.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Median is the median of v (0 for none): the benchmarks' figure of a
// series of measured turns or ratios.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// FailureLog is a debug logger whose records the test prints only when
// it failed (at its cleanup), or when it asked for them (ShowLog): the
// lifecycle steps and the gateway's records of a turn that went wrong,
// without the noise of those that did not. secrets, when any shows in a
// record, fail the test.
func FailureLog(t testing.TB, secrets ...string) *slog.Logger {
	t.Helper()
	buf := &LockedBuffer{}
	t.Cleanup(func() {
		s := buf.String()
		for _, v := range secrets {
			if v != "" && strings.Contains(s, v) {
				t.Errorf("a log record holds a secret")
			}
		}
		why, shown := showLog.LoadAndDelete(t)
		switch {
		case s == "":
		case t.Failed():
			t.Logf("the turn's log records:\n%s", s)
		case shown:
			t.Logf("the turn's log records (%s):\n%s", why, s)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// showLog holds the tests that asked for their FailureLog records.
var showLog sync.Map // testing.TB -> string

// ShowLog makes t's FailureLog records print at its cleanup although it
// passed, saying why: a test that tolerates what it does not test (a
// reply the CLI abandoned and asked again) still leaves the records that
// name the layer which cut it (the gateway's: the agent left, the grant
// ended, or the upstream broke the reply off).
func ShowLog(t testing.TB, why string) { showLog.Store(t, why) }
