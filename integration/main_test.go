package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	code := m.Run()
	pgtest.Stop()
	testenv.RemoveBuilds()
	sshtest.Cleanup()
	if left := sshtest.Leftovers(); left != "" {
		fmt.Fprintln(os.Stderr, "FAIL: the tests left sshd containers behind:\n"+left)
		if code == 0 {
			code = 1
		}
	}
	// No test may leave a container or volume of its own behind.
	if left := dockertest.Leftovers(); left != "" {
		fmt.Fprintln(os.Stderr, "FAIL: the tests left Docker objects behind:\n"+left)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// outpostBinary is the static outpost command (testenv.OutpostBinary),
// built once per test process; it also runs inside containers.
func outpostBinary(t testing.TB) string {
	t.Helper()
	return testenv.OutpostBinary(t)
}
