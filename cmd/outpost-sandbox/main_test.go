package main_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/testenv"
)

// forbidden are the libraries the in-sandbox binary must not link: the
// providers' clients, the server's and the stores' libraries, the JSON
// Schema library. Each would add its size to every copy into a sandbox
// and its init to every exec there.
var forbidden = []string{
	"k8s.io/",
	"sigs.k8s.io/",
	"github.com/docker/",
	"github.com/moby/",
	"github.com/prometheus/",
	"github.com/jackc/",
	"github.com/santhosh-tekuri/jsonschema",
	"golang.org/x/crypto/ssh",
	"google.golang.org/protobuf",
	selfbin.Module + "/providers/",
	selfbin.Module + "/server",
	selfbin.Module + "/conversation",
	selfbin.Module + "/output",
	selfbin.Module + "/cmd/outpost/",
}

// required are the libraries the in-sandbox binary links on purpose
// beyond the standard library: yamux multiplexes the connections of a
// tunnel (providers/tunnel) over the exec stream of its sandbox-shim
// tunnel mode. Small, no dependencies of its own, no init work.
var required = []string{"github.com/hashicorp/yamux"}

// TestDependencies: go list -deps of the in-sandbox binary names none of
// the forbidden libraries, and each required one.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-deps", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed %d packages", len(deps))
	}
	for _, r := range required {
		if !slices.Contains(deps, r) {
			t.Errorf("the in-sandbox binary does not link %s", r)
		}
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the in-sandbox binary depends on %s", d)
			}
		}
	}
}

// TestSubcommands: the built binary is static, runs the echo agent and the
// exec shim, answers `version` as the bootstrap check asks, and refuses
// anything else.
func TestSubcommands(t *testing.T) {
	bin := testenv.SandboxBinary(t)
	if err := selfbin.Check(bin, runtime.GOARCH); err != nil {
		t.Fatalf("not a static binary: %v", err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"echo", []string{echo.Subcommand, "--", "hello"}, "hello"},
		{"shim", []string{shim.Subcommand, "lookpath", "sh"}, "/sh"},
		{"version", []string{"version"}, "outpost-sandbox "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(cmd.Environ(), "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("%v: %v\n%s\nwant %q in the output", tc.args, err, out, tc.want)
			}
		})
	}
	out, err := exec.Command(bin, "run", "hello").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "usage: outpost-sandbox") {
		t.Errorf("outpost-sandbox run: exit %d, %s; want 2 and a usage", code, out)
	}
}

// TestInitTrace: the in-sandbox binary initialises almost nothing: every
// package it links stays under a small budget, and so does their sum.
func TestInitTrace(t *testing.T) {
	trace := testenv.InitTrace(t, testenv.SandboxBinary(t), "version")
	var bytes, allocs int64
	for _, p := range trace {
		bytes += p.Bytes
		allocs += p.Allocs
	}
	if bytes > 64<<10 || allocs > 400 {
		t.Errorf("the in-sandbox binary allocates %d bytes in %d allocations at init; want at most 64 KiB, 400:\n%v", bytes, allocs, trace)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
