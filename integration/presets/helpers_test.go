package presets

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/sandbox"
)

// The helpers below are the integration package's, for the preset tests
// that run here in a package of their own.

// providerKinds are the providers the tests run on.
var providerKinds = []string{"local", "docker"}

// eachProvider runs f as a parallel subtest per provider.
func eachProvider(t *testing.T, f func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// outpostBinary is the static outpost command, built once per process.
func outpostBinary(t testing.TB) string {
	t.Helper()
	return testenv.OutpostBinary(t)
}

// runOutpost runs the built outpost binary with a private OUTPOST_HOME.
func runOutpost(t *testing.T, home, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(outpostBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func copyFile(src, dst string) error {
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

// outcome is what one turn produced.
type outcome struct {
	res    *sandbox.Result
	err    error
	events []harness.Event
	stderr string
}

func (o *outcome) ofType(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func times(u harness.Usage, n int64) harness.Usage {
	return harness.Usage{InputTokens: u.InputTokens * n, OutputTokens: u.OutputTokens * n, CacheReadTokens: u.CacheReadTokens * n, CacheWriteTokens: u.CacheWriteTokens * n, Complete: u.Complete}
}

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}`

func equalTypes(a, b []harness.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eventSummary(evs []harness.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(string(ev.Type))
		if ev.Kind != "" {
			b.WriteString("/" + ev.Kind)
		}
		if ev.Text != "" {
			t := ev.Text
			if len(t) > 80 {
				t = t[:80] + "…"
			}
			b.WriteString(" " + t)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// runOutpostEnv runs the built outpost binary with a private OUTPOST_HOME
// and the given environment over the test's.
func runOutpostEnv(t *testing.T, home, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(outpostBinary(t), args...)
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

func (o *outcome) kind(kind string) []harness.Event {
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}
