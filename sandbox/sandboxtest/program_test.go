package sandboxtest_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestShellScripts runs the Shell scripts under every shell found on the
// host, beyond the /bin/sh the local provider's tests use.
func TestShellScripts(t *testing.T) {
	shells := map[string][]string{}
	for _, sh := range []string{"sh", "dash", "bash"} {
		if p, err := exec.LookPath(sh); err == nil {
			shells[sh] = []string{p}
		}
	}
	if p, err := exec.LookPath("busybox"); err == nil {
		shells["busybox"] = []string{p, "sh"}
	}
	if len(shells) == 0 {
		t.Skip("no shell on the host")
	}
	for name, argv := range shells {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "f")
			run := func(p sandboxtest.Program, args ...string) (string, string, int) {
				t.Helper()
				req := sandboxtest.Shell(p, args...)
				if req.Path != "/bin/sh" {
					t.Fatalf("Shell's path is %q", req.Path)
				}
				cmd := exec.Command(argv[0], append(argv[1:], req.Args...)...)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SANDBOXTEST_VAR=a b  c"}
				cmd.Dir = dir
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatalf("%v: %v", p, err)
				}
				return out.String(), errb.String(), cmd.ProcessState.ExitCode()
			}
			check := func(what, got, want string) {
				t.Helper()
				if got != want {
					t.Errorf("%s: got %q, want %q", what, got, want)
				}
			}
			out, errOut, _ := run(sandboxtest.Echo, "a  b", `c\n`, "-n")
			check("Echo stdout", out, "a  b c\\n -n\n")
			check("Echo stderr", errOut, "")
			out, errOut, _ = run(sandboxtest.Stderr, "oops")
			check("Stderr", out+"|"+errOut, "|oops\n")
			if _, _, code := run(sandboxtest.Exit, "42"); code != 42 {
				t.Errorf("Exit 42: status %d", code)
			}
			out, _, _ = run(sandboxtest.Env, "SANDBOXTEST_VAR")
			check("Env", out, "a b  c\n")
			out, _, _ = run(sandboxtest.Env, "SANDBOXTEST_UNSET")
			check("Env of an unset variable", out, "\n")
			out, _, _ = run(sandboxtest.Pwd)
			if real, _ := filepath.EvalSymlinks(dir); out != dir+"\n" && out != real+"\n" {
				t.Errorf("Pwd: %q, want %q", out, dir)
			}
			out, _, _ = run(sandboxtest.Big, "5")
			check("Big", out, "xxxxx\n")
			run(sandboxtest.WriteFile, file, "line 1\nline 2")
			out, _, _ = run(sandboxtest.ReadFile, file)
			check("WriteFile then ReadFile", out, "line 1\nline 2")
			if err := os.Chmod(file, fs.ModeSetuid|0o750); err != nil {
				t.Fatal(err)
			}
			out, _, _ = run(sandboxtest.Mode, file)
			check("Mode", out, "4750\n")
			out, _, _ = run(sandboxtest.Sleep, "0")
			check("Sleep", out, "started\n")
		})
	}
}

func TestPrograms(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range sandboxtest.Programs() {
		name := p.String()
		if strings.HasPrefix(name, "Program(") || seen[name] {
			t.Errorf("program %d has name %q", int(p), name)
		}
		seen[name] = true
	}
	defer func() {
		if recover() == nil {
			t.Error("Shell of an unknown program did not panic")
		}
	}()
	sandboxtest.Shell(sandboxtest.Program(len(seen)))
}
