package engine

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// DefaultCheckTimeout bounds RunOptions.Check when CheckTimeout is zero.
const DefaultCheckTimeout = 10 * time.Minute

// checkTail is how much of a check's output Result.Check keeps: its end.
const checkTail = 4 << 10

// CheckResult is how the turn's check command ended (RunOptions.Check).
type CheckResult struct {
	Command string `json:"command"`
	// Passed is true when the command exited 0.
	Passed     bool  `json:"passed"`
	ExitCode   int   `json:"exit_code"`
	DurationMS int64 `json:"duration_ms"`
	// Output is the end of its standard output and error, interleaved,
	// redacted; Error says why it could not run or was stopped.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// tail keeps the last n bytes written to it.
type tail struct {
	n   int
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*t.n {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	b := t.buf
	if len(b) > t.n {
		b = b[len(b)-t.n:]
	}
	return string(b)
}

// runCheck runs RunOptions.Check in the turn's sandbox once the turn is
// over (after its checkpoint: what the check builds is not recorded), in
// the workspace, with the agent's environment. A check that fails, or
// cannot run, is a result, not the turn's error.
func (e *turnRun) runCheck(ctx context.Context, lease *sandbox.Lease, res *Result) {
	if e.o.Check == "" || res == nil || e.ans.inner {
		return
	}
	limit := e.o.CheckTimeout
	if limit <= 0 {
		limit = DefaultCheckTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	cr := &CheckResult{Command: e.o.Check, ExitCode: -1}
	res.Check = cr
	req, err := e.execRequest(lease, harness.Command{Path: "sh", Args: []string{"-c", e.o.Check}})
	if err != nil {
		cr.Error = e.red.String(err.Error())
		return
	}
	out := &tail{n: checkTail}
	mu := &syncWriter{w: out}
	j, err := lease.Launch(cctx, req, &sandbox.JobOptions{Stdout: mu.copy, Stderr: mu.copy})
	if err != nil {
		cr.Error = e.red.String(err.Error())
		return
	}
	stop := context.AfterFunc(cctx, j.Stop)
	st, err := j.Wait()
	stop()
	cr.DurationMS = time.Since(start).Milliseconds()
	cr.Output = e.red.String(out.String())
	cr.ExitCode = st.Code
	cr.Passed = err == nil && cctx.Err() == nil && st.Code == 0
	switch {
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		cr.Error = "stopped after " + limit.String()
	case err != nil:
		cr.Error = e.red.String(outpost.Wrap(outpost.Sandbox, "check", err).Error())
	}
	e.clock.step("check")
}

// syncWriter serialises the writes of two streams' copies into one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) copy(r io.Reader) { io.Copy(s, r) }
