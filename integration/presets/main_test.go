package presets

import (
	"fmt"
	"os"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

// TestMain: the presets measured against their real CLIs (Gemini CLI, Qwen
// Code, OpenCode), in a package of their own so that go test runs them
// beside the rest of integration/.
func TestMain(m *testing.M) {
	echo.MaybeRun()
	code := m.Run()
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
