package integration

import (
	"fmt"
	"os"
	"testing"

	hacptest "github.com/outposthq/outpost/harness/acp/acptest"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

// TestMain runs four tests at a time (testenv.DefaultParallel; -parallel
// sets another number): most wait on containers, sshd, PostgreSQL or the
// fakes' timings rather than use the CPU. The tests that set process-wide
// state (t.Setenv, a PostgreSQL outage, the load test) are not parallel:
// they run first, alone.
func TestMain(m *testing.M) {
	echo.MaybeRun()
	// The scripted ACP agent of the TypeScript client's permission test
	// (TestServeTypeScriptClient: OUTPOST_ACP_AGENT).
	hacptest.MaybeRun()
	testenv.DefaultParallel(4)
	code := m.Run()
	removeWorkspacesHome()
	pgtest.Stop()
	testenv.RemoveBuilds()
	sshtest.CleanupAfter(code)
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

// The end-to-end helpers integration/presets shares (internal/testenv).
var (
	eachProvider = testenv.EachProvider
	onLocal      = testenv.OnLocal
	copyFile     = testenv.CopyFile
)

type lockedBuffer = testenv.LockedBuffer

// runOutpost runs the built outpost binary with a private OUTPOST_HOME.
func runOutpost(t *testing.T, home, dir string, args ...string) (int, string, string) {
	t.Helper()
	return testenv.RunOutpost(t, home, dir, nil, args...)
}

// runOutpostEnv is runOutpost with env added.
func runOutpostEnv(t *testing.T, home, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return testenv.RunOutpost(t, home, dir, env, args...)
}
