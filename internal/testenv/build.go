package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// OutpostPackage is the import path of the outpost command.
const OutpostPackage = "github.com/outposthq/outpost/cmd/outpost"

// OutpostBinary returns a static outpost binary (CGO_ENABLED=0 go build
// of cmd/outpost, so it also runs inside containers and pods), built once
// per test process, with outpost-sandbox beside it as a release has it. It fails the test when the build fails. TestMain
// functions call RemoveBuilds when the tests are done.
func OutpostBinary(tb testing.TB) string {
	tb.Helper()
	return GoBuild(tb, OutpostPackage)
}

// SandboxPackage is the import path of the in-sandbox binary: the exec
// shim and the echo agent that docker, kubernetes and ssh sandboxes run.
const SandboxPackage = "github.com/outposthq/outpost/cmd/outpost-sandbox"

// SandboxBinary returns a static build of cmd/outpost-sandbox, built once
// per test process, like OutpostBinary.
func SandboxBinary(tb testing.TB) string {
	tb.Helper()
	return GoBuild(tb, SandboxPackage)
}

var (
	buildMu  sync.Mutex
	buildDir string
	builds   = map[string]*built{}
)

type built struct {
	once sync.Once
	path string
	err  error
}

// GoBuild returns a static build of the Go command pkg (an import path of
// this module, or any package the module's go.mod reaches), built once per
// test process into a directory RemoveBuilds removes.
func GoBuild(tb testing.TB, pkg string) string {
	tb.Helper()
	p, err := Build(pkg)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return p
}

// Build is GoBuild for setup code without a test at hand.
func Build(pkg string) (string, error) {
	buildMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &built{}
		builds[pkg] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		b.path, b.err = goBuild(pkg)
		if b.err == nil && pkg == OutpostPackage {
			b.err = sandboxBeside(b.path)
		}
	})
	return b.path, b.err
}

// sandboxBeside puts the in-sandbox binary beside the outpost binary bin,
// as a release installs them: the CLI then runs the echo agent as
// outpost-sandbox (selfbin.HostAgent, 5 MB, about a quarter of the CPU
// of a start of the 48 MB CLI) rather than as itself. The suite runs
// thousands of echo turns through the CLI.
func sandboxBeside(bin string) error {
	sb, err := Build(SandboxPackage)
	if err != nil {
		return err
	}
	dst := filepath.Join(filepath.Dir(bin), "outpost-sandbox")
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	tmp := dst + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.Link(sb, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// SharedBuildsVariable names a directory through which the test processes
// of one run share their builds (scripts/test.sh sets it to a directory of
// the run's own and removes it at the end). The first process that needs
// a package builds it there under a lock (sharedBuild), and the others
// take that build instead of linking their own: a dozen test processes
// need cmd/outpost or cmd/outpost-sandbox, and each static link is
// seconds of CPU. The tree must not change during the run.
const SharedBuildsVariable = "OUTPOST_TEST_BUILDS"

func goBuild(pkg string) (string, error) {
	if dir := os.Getenv(SharedBuildsVariable); dir != "" {
		return sharedBuild(dir, pkg)
	}
	buildMu.Lock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "outpost-testbuild-")
		if err != nil {
			buildMu.Unlock()
			return "", err
		}
		buildDir = d
	}
	dir := buildDir
	buildMu.Unlock()
	out, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(out, path.Base(pkg))
	return bin, buildTo(pkg, bin)
}

// sharedBuild is pkg's build in the shared directory dir, made by the
// first process to need it while the others wait on its lock file.
func sharedBuild(dir, pkg string) (string, error) {
	name := strings.NewReplacer("/", "_", ".", "_").Replace(pkg)
	bin := filepath.Join(dir, name, path.Base(pkg))
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	tmp := bin + ".building"
	if err := buildTo(pkg, tmp); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return bin, os.Rename(tmp, bin)
}

// buildTo builds pkg statically (CGO_ENABLED=0) into bin.
func buildTo(pkg, bin string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool(), "build", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// RemoveBuilds removes what GoBuild built (not the shared builds of
// SharedBuildsVariable: the run's script removes those).
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// goTool is the go command: on PATH, else the running toolchain's.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// moduleRoot is the directory of outpost's go.mod: beside this source
// file, else above the working directory.
func moduleRoot() (string, error) {
	if _, src, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(src), "..", "..")
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// Main runs the tests of m, then cleanup (shared servers, builds), then
// leftovers, which removes and lists what the tests left behind: a run
// that left something fails, saying what. It exits with the run's status.
func Main(m *testing.M, what string, cleanup func(), leftovers func() string) {
	code := m.Run()
	cleanup()
	if left := leftovers(); left != "" {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %s behind (removed now):\n%s\n", what, left)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Provider makes a provider of the test's from o with mod applied to it,
// through newProvider (a provider's New), and closes it when the test
// ends: the one body of the providers' test helpers (dockertest.Provider,
// sshtest.Provider).
func Provider[O any, P interface{ Close() error }](tb testing.TB, o *O, mod []func(*O), newProvider func(*O) (P, error)) P {
	tb.Helper()
	for _, m := range mod {
		m(o)
	}
	p, err := newProvider(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
