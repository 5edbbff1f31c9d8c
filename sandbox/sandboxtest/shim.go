package sandboxtest

import (
	"context"

	"github.com/outposthq/outpost/internal/shim/shimtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// ShimHarness is the exec shim's table (shimtest.Run) over the sandbox of
// l, straight through its driver (no portable layer in between): shell
// is a POSIX shell in the sandbox; programs get the provider's
// environment and run in its working directory, which is writable.
func ShimHarness(l *sandbox.Lease, shell string) shimtest.Harness {
	sb := l.Sandbox()
	env := baseEnv(l)
	return shimtest.Harness{
		Start: func(ctx context.Context, path string, args []string, dir string) (shimtest.Process, error) {
			return sb.Start(ctx, driver.ExecRequest{Path: path, Args: args, Env: env, Dir: dir})
		},
		Signal: func(p shimtest.Process, kill bool) error {
			sig := driver.Terminate
			if kill {
				sig = driver.Kill
			}
			return p.(driver.Process).Signal(sig)
		},
		Shell: shell,
		Dir:   sb.Workdir(),
	}
}
