package shim

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// childEnv marks the test binary re-executed as the shim.
const childEnv = "OUTPOST_SHIM_TEST_CHILD"

// exitNotShim is the test binary's status when it is started as a program
// named like the shim but without childEnv.
const exitNotShim = 99

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		MaybeRun()
		os.Exit(2)
	}
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		// Started as a program without the marker (TestSpareOwnModes):
		// say so, and do not run the tests again.
		os.Exit(exitNotShim)
	}
	os.Exit(m.Run())
}

func TestReadSpec(t *testing.T) {
	good := Spec{Dir: "/w", Stdin: true, Path: "prog", Args: []string{"-x", "a b"}, Env: map[string]string{"PATH": "/bin", "K": "v=1"}}
	line := SpecLine(good)
	for _, c := range []struct {
		name string
		in   string
		want *Spec  // nil: an error
		is   error  // the error wraps it
		msg  string // the error says it
		rest string // what is left unread
	}{
		{name: "request and stdin", in: string(line) + "program input", want: &good, rest: "program input"},
		{name: "discarded", in: "", is: errNoSpec},
		{name: "ends in the length", in: "12", is: io.ErrUnexpectedEOF},
		{name: "ends in the request", in: "12 {\"pa", is: io.ErrUnexpectedEOF},
		{name: "no length", in: "{\"path\":\"x\"}\n", msg: "does not start with its length"},
		{name: "too long", in: "99999999999 {}", msg: "too long"},
		{name: "longer than said", in: "2 {}}\n", msg: "longer than its length"},
		{name: "bad JSON", in: "4 {xx}\n", msg: "launch request"},
		{name: "trailing JSON", in: "5 {}{}\n\n", msg: "launch request"},
		{name: "no program", in: "2 {}\n", msg: "names no program"},
		{name: "NUL in a name", in: string(SpecLine(Spec{Path: "p", Env: map[string]string{"A\x00B": "v"}})), msg: "invalid variable"},
		{name: "NUL in a value", in: string(SpecLine(Spec{Path: "p", Env: map[string]string{"A": "v\x00w"}})), msg: "invalid variable"},
		{name: "= in a name", in: string(SpecLine(Spec{Path: "p", Env: map[string]string{"A=B": "v"}})), msg: "invalid variable"},
		{name: "empty name", in: string(SpecLine(Spec{Path: "p", Env: map[string]string{"": "v"}})), msg: "invalid variable"},
		{name: "NUL in an argument", in: string(SpecLine(Spec{Path: "p", Args: []string{"a\x00"}})), msg: "NUL"},
		{name: "NUL in the directory", in: string(SpecLine(Spec{Path: "p", Dir: "/a\x00"})), msg: "NUL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := strings.NewReader(c.in)
			got, err := readSpec(r)
			if c.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(*c.want, got); d != "" {
					t.Errorf("spec (-want +got):\n%s", d)
				}
				rest, _ := io.ReadAll(r)
				if string(rest) != c.rest {
					t.Errorf("left unread %q, want %q", rest, c.rest)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, spec %+v", got)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v, want %v", err, c.is)
			}
			if c.msg != "" && !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
			if strings.Contains(err.Error(), "v\x00w") {
				t.Errorf("error shows a value: %q", err)
			}
		})
	}
}

// spare runs the test binary as a spare exec shim fed stdin, and returns
// its stdout after its ready line (handshake included), stderr and exit
// status.
func spare(t *testing.T, runDir, stdin string) (string, string, int) {
	t.Helper()
	args := SpareExecArgs(os.Args[0], "tok", runDir)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "OUTPOST_SHIM_TEST_SECRET=leaked")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	rest, ok := strings.CutPrefix(out.String(), ReadyLine)
	if !ok {
		t.Fatalf("stdout %q does not start with the ready line", out.String())
	}
	return rest, errb.String(), cmd.ProcessState.ExitCode()
}

// handshakeOf splits a shim's stdout into its handshake and the rest.
func handshakeOf(t *testing.T, out string) (Handshake, string) {
	t.Helper()
	r := bufio.NewReader(strings.NewReader(out))
	h, err := ReadHandshake(r)
	if err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	rest, _ := io.ReadAll(r)
	return h, string(rest)
}

func TestSpareShim(t *testing.T) {
	path := os.Getenv("PATH")
	t.Run("discarded", func(t *testing.T) {
		out, errOut, code := spare(t, t.TempDir(), "")
		if out != "" || errOut != "" || code != 0 {
			t.Errorf("stdout %q, stderr %q, exit %d: want nothing after the ready line, and 0", out, errOut, code)
		}
	})
	t.Run("exact environment", func(t *testing.T) {
		env := map[string]string{"PATH": path, "A": "one two", "EMPTY": "", "MULTI": "x\ny"}
		out, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: "env", Args: []string{"-0"}, Env: env})))
		h, rest := handshakeOf(t, out)
		if h.Err != nil || h.PID <= 0 || code != 0 {
			t.Fatalf("handshake %+v, exit %d", h, code)
		}
		got := strings.Split(strings.TrimSuffix(rest, "\x00"), "\x00")
		slices.Sort(got)
		want := []string{"A=one two", "EMPTY=", "MULTI=x\ny", "PATH=" + path}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("environment (-want +got):\n%s", d)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		out, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: "cat", Stdin: true, Env: map[string]string{"PATH": path}}))+"to the program\n")
		if _, rest := handshakeOf(t, out); rest != "to the program\n" || code != 0 {
			t.Errorf("output %q, exit %d", rest, code)
		}
	})
	t.Run("no stdin", func(t *testing.T) {
		out, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: "cat", Env: map[string]string{"PATH": path}}))+"not for the program\n")
		if _, rest := handshakeOf(t, out); rest != "" || code != 0 {
			t.Errorf("output %q, exit %d: the program read the shim's stdin", rest, code)
		}
	})
	t.Run("directory and arguments", func(t *testing.T) {
		dir := t.TempDir()
		out, _, _ := spare(t, t.TempDir(), string(SpecLine(Spec{Path: "sh", Dir: dir, Args: []string{"-c", `pwd; printf '%s|' "$@"`, "sh", "a b", ""}, Env: map[string]string{"PATH": path}})))
		if _, rest := handshakeOf(t, out); rest != dir+"\na b||" {
			t.Errorf("output %q", rest)
		}
	})
	t.Run("exit status", func(t *testing.T) {
		_, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: "sh", Args: []string{"-c", "exit 3"}, Env: map[string]string{"PATH": path}})))
		if code != 3 {
			t.Errorf("exit %d, want 3", code)
		}
	})
	t.Run("death by signal", func(t *testing.T) {
		run := t.TempDir()
		_, _, code := spare(t, run, string(SpecLine(Spec{Path: "sh", Args: []string{"-c", "kill -TERM $$"}, Env: map[string]string{"PATH": path}})))
		if code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
		}
		if b, err := os.ReadFile(filepath.Join(run, "exit-tok")); err != nil || string(b) != "signal 15\n" {
			t.Errorf("status file %q, %v", b, err)
		}
	})
	for _, c := range []struct {
		name string
		spec string
		is   error
		code int
	}{
		{"not found", string(SpecLine(Spec{Path: "no-such-program", Env: map[string]string{"PATH": path}})), ErrNotFound, ExitNotFound},
		{"missing directory", string(SpecLine(Spec{Path: "true", Dir: "/no/such/dir", Env: map[string]string{"PATH": path}})), ErrNoDir, ExitCannot},
		{"bad JSON", "5 hello\n", ErrStart, ExitCannot},
		{"too long", "99999999999 {", ErrStart, ExitCannot},
		{"cut short", "100 {\"path\":", ErrStart, ExitCannot},
		{"NUL in a value", string(SpecLine(Spec{Path: "true", Env: map[string]string{"A": "\x00"}})), ErrStart, ExitCannot},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, code := spare(t, t.TempDir(), c.spec)
			h, rest := handshakeOf(t, out)
			if !errors.Is(h.Err, c.is) || rest != "" || code != c.code {
				t.Errorf("handshake %+v, then %q, exit %d: want %v and exit %d", h, rest, code, c.is, c.code)
			}
		})
	}
	t.Run("signal while waiting", func(t *testing.T) {
		args := SpareExecArgs(os.Args[0], "tok", t.TempDir())
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		w, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		out := bufio.NewReader(stdout)
		if line, err := out.ReadString('\n'); line != ReadyLine {
			t.Fatalf("first line %q, %v", line, err)
		}
		// Ready: it handles signals. It ends although its stdin stays open.
		cmd.Process.Signal(syscall.SIGTERM)
		h, err := ReadHandshake(out)
		if err != nil || !errors.Is(h.Err, ErrStart) {
			t.Errorf("handshake %+v, %v", h, err)
		}
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d", code)
		}
	})
}

// TestSpareOwnModes: a spare asked to run the shim's own binary in a mode
// of inProcessModes runs it itself. The request's environment is empty,
// so the test binary started as a program would not be the shim (it would
// run the tests): a right answer proves no program was started.
func TestSpareOwnModes(t *testing.T) {
	self := os.Args[0]
	if !filepath.IsAbs(self) {
		t.Skipf("the test binary's path %q is relative", self)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("tar", func(t *testing.T) {
		out, errOut, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: self, Args: TarArgs(self, dir)[1:]})))
		h, rest := handshakeOf(t, out)
		if h.Err != nil || code != 0 {
			t.Fatalf("handshake %+v, exit %d, stderr %q", h, code, errOut)
		}
		tr := tar.NewReader(strings.NewReader(rest))
		var names []string
		for {
			hd, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, hd.Name)
		}
		want := []string{filepath.Base(dir), filepath.Base(dir) + "/f.txt"}
		if d := cmp.Diff(want, names); d != "" {
			t.Errorf("entries (-want +got):\n%s", d)
		}
	})
	t.Run("tar of a missing path", func(t *testing.T) {
		out, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: self, Args: TarArgs(self, filepath.Join(dir, "missing"))[1:]})))
		if h, rest := handshakeOf(t, out); h.Err != nil || rest != "" || code != ExitMissing {
			t.Errorf("handshake %+v, then %q, exit %d: want exit %d", h, rest, code, ExitMissing)
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		out, errOut, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: self, Args: SnapshotArgs(self, dir, 10)[1:]})))
		_, rest := handshakeOf(t, out)
		if code != 0 || !strings.Contains(rest, `"f.txt"`) {
			t.Errorf("exit %d, output %q, stderr %q", code, rest, errOut)
		}
	})
	t.Run("not an own mode", func(t *testing.T) {
		// lookpath reads PATH: it is started as a program, here the test
		// binary, which is no shim without its marker variable.
		_, _, code := spare(t, t.TempDir(), string(SpecLine(Spec{Path: self, Args: LookPathArgs(self, "sh")[1:]})))
		if code != exitNotShim {
			t.Errorf("exit %d, want %d: lookpath was not started as a program", code, exitNotShim)
		}
	})
}

func TestSpareExecArgs(t *testing.T) {
	got := strings.Join(SpareExecArgs("/b", "tok", "/run"), " ")
	if got != "/b sandbox-shim exec --spec-stdin --token=tok --run=/run" {
		t.Errorf("SpareExecArgs = %q", got)
	}
	// Both forms are recognized by signal and reap by their command line.
	cmdline := strings.Join(SpareExecArgs("/b", "tok", "/run"), "\x00") + "\x00"
	if !strings.Contains(cmdline, "\x00--token=tok\x00") || !strings.Contains(cmdline, "\x00--run=/run\x00") || !strings.Contains(cmdline, "\x00"+Subcommand+"\x00exec\x00") {
		t.Errorf("command line %q", cmdline)
	}
}
