package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/pgtest"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	code := m.Run()
	pgtest.Stop()
	cleanupBuilds()
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

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// outpostBinary builds the outpost command once per test process, as a
// static binary (CGO_ENABLED=0) so it also runs inside containers.
func outpostBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "outpost-integration-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "outpost")
		cmd := exec.Command("go", "build", "-o", buildBin, "github.com/outposthq/outpost/cmd/outpost")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func cleanupBuilds() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}
