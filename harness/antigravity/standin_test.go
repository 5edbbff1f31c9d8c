package antigravity_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost/harness/harnesstest"
)

const goldenDir = "testdata/golden"

var (
	standInOnce sync.Once
	standInDir  string
	standInErr  error
)

// standIn builds the scripted agy of testdata/agy once per test binary and
// returns its path.
func standIn(t testing.TB) string {
	t.Helper()
	standInOnce.Do(func() {
		standInDir, standInErr = os.MkdirTemp("", "agy-standin-")
		if standInErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(standInDir, "agy"), "./testdata/agy").CombinedOutput()
		if err != nil {
			standInErr = errors.New("go build ./testdata/agy: " + err.Error() + "\n" + string(out))
		}
	})
	if standInErr != nil {
		t.Fatal(standInErr)
	}
	return filepath.Join(standInDir, "agy")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if standInDir != "" {
		os.RemoveAll(standInDir)
	}
	os.Exit(code)
}

// goldenCase is one scripted run of the stand-in. The golden files are
// its output, not a recording of the real CLI (see testdata/golden/README.md).
type goldenCase struct {
	name   string
	before []string // a run made first in the same home
	args   []string
}

var goldenCases = []goldenCase{
	{name: "text", args: []string{"-p", "Say hello"}},
	{name: "tool", args: []string{"-p", "Run a command AGY_TOOL"}},
	{name: "resume", before: []string{"-p", "First turn"}, args: []string{"-p", "Second turn", "--conversation", "00000000-0000-4000-8000-000000000001"}},
	{name: "resume-lost", args: []string{"-p", "Second turn", "--conversation", "11111111-2222-4333-8444-555555555555"}},
	{name: "quota", args: []string{"-p", "x AGY_QUOTA"}},
	{name: "outage", args: []string{"-p", "x AGY_OUTAGE"}},
	{name: "auth", args: []string{"-p", "x AGY_AUTH"}},
	{name: "result-error", args: []string{"-p", "x AGY_RESULT_ERROR"}},
	{name: "denied", args: []string{"-p", "x AGY_DENIED"}},
	{name: "empty", args: []string{"-p", "x AGY_EMPTY"}},
}

// runStandIn runs the stand-in in a fresh home and a fixed-looking
// workdir; the workdir's real path is replaced by /work in the output.
func runStandIn(t *testing.T, c goldenCase) (stdout, stderr []byte, exit int) {
	t.Helper()
	bin := standIn(t)
	home, wd := t.TempDir(), t.TempDir()
	common := []string{"--output-format", "stream-json", "--print-timeout", "30m0s", "--dangerously-skip-permissions"}
	run := func(args []string) ([]byte, []byte, int) {
		cmd := exec.Command(bin, append(append([]string{}, args[:2]...), append(common, args[2:]...)...)...)
		cmd.Dir = wd
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "AGY_STANDIN_FIXED_IDS=1"}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		clean := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(wd), []byte("/work")) }
		return clean(out.Bytes()), clean(errb.Bytes()), cmd.ProcessState.ExitCode()
	}
	if c.before != nil {
		if _, _, code := run(c.before); code != 0 {
			t.Fatalf("%s: the first run exited %d", c.name, code)
		}
	}
	return run(c.args)
}

// TestStandInGoldens checks that the stand-in still prints what the golden
// files hold (go test -update rewrites them from it). The suite decodes
// those files like recordings of a real CLI.
func TestStandInGoldens(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runStandIn(t, c)
			files := map[string][]byte{
				c.name + harnesstest.StdoutSuffix: out,
				c.name + ".stderr":                errOut,
				c.name + ".exit":                  []byte(strconv.Itoa(code) + "\n"),
			}
			for name, got := range files {
				path := filepath.Join(goldenDir, name)
				if harnesstest.Update() {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (go test -update writes it)", err)
				}
				if !bytes.Equal(want, got) {
					t.Errorf("%s differs from the stand-in's output:\n--- golden\n%s\n--- stand-in\n%s", name, want, got)
				}
			}
		})
	}
}

// golden reads a golden file.
func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goldenLines(t *testing.T, name string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, l := range bytes.Split(golden(t, name+harnesstest.StdoutSuffix), []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, l)
		}
	}
	return out
}

func goldenExit(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(string(golden(t, name+".exit"))))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
