package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recTB is a passing test that keeps its cleanups and log lines.
type recTB struct {
	testing.TB
	cleanups []func()
	logs     []string
}

func (r *recTB) Helper()          {}
func (r *recTB) Failed() bool     { return false }
func (r *recTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recTB) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recTB) Errorf(format string, args ...any) {
	r.logs = append(r.logs, "ERROR "+fmt.Sprintf(format, args...))
}
func (r *recTB) end() {
	for _, f := range r.cleanups {
		f()
	}
}

// TestShowLog: a passing test's FailureLog records print only when it
// asked for them with ShowLog, with the reason.
func TestShowLog(t *testing.T) {
	quiet := &recTB{TB: t}
	FailureLog(quiet).Debug("gateway: the agent left before its reply ended")
	quiet.end()
	if len(quiet.logs) != 0 {
		t.Errorf("a passing test printed %q", quiet.logs)
	}
	shown := &recTB{TB: t}
	FailureLog(shown).Debug("gateway: the agent left before its reply ended")
	ShowLog(shown, "an abandoned reply")
	shown.end()
	if len(shown.logs) != 1 || !strings.Contains(shown.logs[0], "(an abandoned reply)") || !strings.Contains(shown.logs[0], "the agent left") {
		t.Errorf("logs %q", shown.logs)
	}
}
