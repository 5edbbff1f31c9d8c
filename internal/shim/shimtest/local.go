package shimtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/shim"
)

// Local is a Harness that runs the exec shim as a child of the test
// binary (whose TestMain must call shim.MaybeRun first; childEnv, such
// as "NAME=1", is added to the child's environment), through a
// shim.Process over a local transport: the table at the unit level, with
// no sandbox.
func Local(t *testing.T, childEnv ...string) Harness {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	run, dir := t.TempDir(), t.TempDir()
	env := map[string]string{"PATH": os.Getenv("PATH")}
	return Harness{
		Start: func(ctx context.Context, path string, args []string, wd string) (Process, error) {
			if wd == "" {
				wd = dir
			}
			token := shim.Token()
			cmd := exec.Command(bin, shim.RemoteExecArgs(bin, token, run, wd, false, path, args)[1:]...)
			cmd.Stdin = bytes.NewReader(shim.EnvLine(env))
			cmd.Env = append(os.Environ(), childEnv...)
			x := shim.Exec{Name: "local", ID: "test", Binary: bin, RunDir: run, Token: token, Path: path}
			p := shim.NewProcess(x, &Child{Cmd: cmd})
			if err := p.Await(ctx); err != nil {
				return nil, err
			}
			return p, nil
		},
		Signal: func(p Process, kill bool) error { return p.(*shim.Process).Kill(kill) },
		Shell:  sh,
		Dir:    dir,
	}
}

// Child is a shim.Transport over a child process of this one running the
// exec shim (Cmd, its stdout and stderr not set).
type Child struct {
	Cmd *exec.Cmd
	// Hold, when not nil, is waited for before the child starts.
	Hold <-chan struct{}
}

func (c *Child) Stream(stdout, stderr io.Writer) error {
	if c.Hold != nil {
		<-c.Hold
	}
	c.Cmd.Stdout, c.Cmd.Stderr = stdout, stderr
	if err := c.Cmd.Start(); err != nil {
		return err
	}
	var ee *exec.ExitError
	if err := c.Cmd.Wait(); err != nil && !errors.As(err, &ee) {
		return err
	}
	return nil
}

func (c *Child) Exit() (harness.ExitStatus, error) {
	st := c.Cmd.ProcessState
	if st == nil {
		return harness.ExitStatus{Code: -1}, errors.New("the shim did not run")
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return harness.ExitStatus{Code: -1, Signal: ws.Signal().String()}, nil
	}
	return harness.ExitStatus{Code: st.ExitCode()}, nil
}

func (c *Child) StartFailed(err, _ error) error { return err }

func (c *Child) Run(ctx context.Context, args []string) (int, []byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stderr = &stderr
	cmd.Env = c.Cmd.Env
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.Bytes(), nil
	}
	return 0, stderr.Bytes(), err
}

func (c *Child) ReadStatus(_ context.Context, path string) ([]byte, error) { return os.ReadFile(path) }

func (c *Child) Releasing() bool { return false }

func (c *Child) Close() {}
