package shim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"
)

// servingInit starts the test binary as `init --serve` and returns a yamux
// client on its stdin and stdout, after checking its hello.
func servingInit(t *testing.T, flags ...string) *yamux.Session {
	t.Helper()
	sess, _ := serving(t, append([]string{"init", ServeFlag}, flags...)...)
	return sess
}

// serving starts the test binary as the shim with args (a serving mode)
// and returns a yamux client on its stdin and stdout, after checking its
// hello, and the process.
func serving(t *testing.T, args ...string) (*yamux.Session, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{Subcommand}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "SERVE_TEST_BASE=base", "SERVE_TEST_KEEP=keep")
	cmd.Dir = "/" // as in a container; a process that drops to another user may not reach the checkout
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sess, err := ServeClient(bufio.NewReader(stdout), stdin, stdin.Close)
	if err != nil {
		t.Fatalf("no hello: %v", err)
	}
	t.Cleanup(func() {
		// The init first: the session's Close waits for its reader.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		sess.Close()
	})
	return sess, cmd
}

// served runs args on a stream of sess with env and stdin, and returns its
// stdout, stderr and status.
func served(t *testing.T, sess *yamux.Session, args, env []string, stdin string) (string, string, int) {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write(append(ServeLine(args, env), stdin...)); err != nil {
		t.Fatal(err)
	}
	st.Close() // the end of the process's stdin; the stream is still read
	var out, errb bytes.Buffer
	code, exited, err := ReadFrames(st, &out, &errb)
	if err != nil || !exited {
		t.Fatalf("ReadFrames: exited %v, %v (stdout %q, stderr %q)", exited, err, out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

func TestServe(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh: %v", err)
	}
	// The init's serving mode (docker) and the serving exec's (kubernetes)
	// serve alike.
	for _, mode := range [][]string{{"init", ServeFlag}, {ServeMode}} {
		t.Run(strings.Join(mode, " "), func(t *testing.T) {
			sess, _ := serving(t, mode...)
			testServe(t, sess, sh)
		})
	}
}

// TestServeModeEnds: the serving exec exits 0 once its stdin ends, and a
// process it started is still reaped by it while it runs.
func TestServeModeEnds(t *testing.T) {
	sess, cmd := serving(t, ServeMode)
	if out, _, code := served(t, sess, []string{"sh", "-c", "sleep 0.1; echo child"}, nil, ""); out != "child\n" || code != 0 {
		t.Fatalf("stdout %q, exit %d", out, code)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the serving exec after its stdin ended: %v", err)
	}
	var errb bytes.Buffer
	bad := exec.Command(os.Args[0], Subcommand, ServeMode, "extra")
	bad.Env = append(os.Environ(), childEnv+"=1")
	bad.Stderr = &errb
	if err := bad.Run(); err == nil || !strings.Contains(errb.String(), "usage") {
		t.Errorf("serve with an argument: %v, stderr %q", err, errb.String())
	}
}

// TestServeClientRefuses: what is not the serving hello starts no
// session.
func TestServeClientRefuses(t *testing.T) {
	for _, out := range []string{"", "usage: outpost sandbox-shim ...\n", HelloLine[:len(HelloLine)-2]} {
		if sess, err := ServeClient(bufio.NewReader(strings.NewReader(out)), io.Discard, nil); err == nil || sess != nil {
			t.Errorf("%q: session %v, error %v", out, sess, err)
		}
	}
}

func testServe(t *testing.T, sess *yamux.Session, sh string) {
	t.Run("streams and status", func(t *testing.T) {
		out, errOut, code := served(t, sess, []string{sh, "-c", `echo out; echo err >&2; read x; echo "got $x"; exit 3`}, nil, "hi\n")
		if out != "out\ngot hi\n" || errOut != "err\n" || code != 3 {
			t.Fatalf("stdout %q, stderr %q, exit %d", out, errOut, code)
		}
	})
	t.Run("environment", func(t *testing.T) {
		// The container's environment (the init's), with the request's
		// variables added, a name given again replaced.
		out, _, code := served(t, sess, []string{sh, "-c", `echo "$SERVE_TEST_BASE $SERVE_TEST_KEEP $ADDED"`}, []string{"SERVE_TEST_BASE=replaced", "ADDED=a=b"}, "")
		if out != "replaced keep a=b\n" || code != 0 {
			t.Fatalf("stdout %q, exit %d", out, code)
		}
	})
	t.Run("a name on PATH", func(t *testing.T) {
		out, _, code := served(t, sess, []string{"sh", "-c", "echo ok"}, nil, "")
		if out != "ok\n" || code != 0 {
			t.Fatalf("stdout %q, exit %d", out, code)
		}
	})
	t.Run("killed by a signal", func(t *testing.T) {
		_, _, code := served(t, sess, []string{sh, "-c", "kill -9 $$"}, nil, "")
		if code != 128+9 {
			t.Fatalf("exit %d, want 137", code)
		}
	})
	t.Run("missing program", func(t *testing.T) {
		_, errOut, code := served(t, sess, []string{"/nonexistent/prog"}, nil, "")
		if code != ExitNotFound || !strings.Contains(errOut, "/nonexistent/prog") {
			t.Fatalf("stderr %q, exit %d", errOut, code)
		}
		_, errOut, code = served(t, sess, []string{"no-such-program-on-path"}, nil, "")
		if code != ExitNotFound || !strings.Contains(errOut, "no-such-program-on-path") {
			t.Fatalf("stderr %q, exit %d", errOut, code)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		for name, line := range map[string]string{
			"not JSON":    "{oops\n",
			"no program":  `{"args":[]}` + "\n",
			"bad env":     `{"args":["/bin/true"],"env":["NOEQUALS"]}` + "\n",
			"no line end": `{"args":["/bin/true"]}`,
			"huge":        `{"args":["` + strings.Repeat("a", maxRequest+10) + `"]}` + "\n",
		} {
			st, err := sess.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				_, _ = io.WriteString(st, line)
				st.Close()
			}()
			var out, errb bytes.Buffer
			code, exited, err := ReadFrames(st, &out, &errb)
			if err != nil || !exited || code != ExitCannot || !strings.Contains(errb.String(), "outpost sandbox-shim init:") {
				t.Errorf("%s: exit %d (exited %v, %v), stderr %q", name, code, exited, err, errb.String())
			}
		}
	})
	t.Run("many at once", func(t *testing.T) {
		// Every stream gets its own process's status, however their ends
		// interleave with the init's reaping.
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := sess.OpenStream()
				if err != nil {
					errs <- err
					return
				}
				defer st.Close()
				if _, err := st.Write(ServeLine([]string{sh, "-c", fmt.Sprintf("echo %d; exit %d", i, i)}, nil)); err != nil {
					errs <- err
					return
				}
				st.Close()
				var out bytes.Buffer
				code, exited, err := ReadFrames(st, &out, io.Discard)
				if err != nil || !exited || code != i || out.String() != fmt.Sprintf("%d\n", i) {
					errs <- fmt.Errorf("stream %d: exit %d (%v, %v), stdout %q", i, code, exited, err, out.String())
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("the session still serves", func(t *testing.T) {
		if out, _, code := served(t, sess, []string{sh, "-c", "echo still"}, nil, ""); out != "still\n" || code != 0 {
			t.Fatalf("stdout %q, exit %d", out, code)
		}
	})
}

func TestReadFrames(t *testing.T) {
	frame := func(typ byte, payload string) string {
		var hdr [8]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
		return string(hdr[:]) + payload
	}
	for name, c := range map[string]struct {
		in        string
		out, errs string
		code      int
		exited    bool
		wantErr   error
		errSubstr string
	}{
		"whole":         {in: frame(1, "a") + frame(2, "b") + frame(1, "c") + frame(4, "7"), out: "ac", errs: "b", code: 7, exited: true},
		"no exit":       {in: frame(1, "a"), out: "a", wantErr: io.ErrUnexpectedEOF},
		"cut frame":     {in: frame(1, "abc")[:10], out: "ab", wantErr: io.ErrUnexpectedEOF},
		"unknown type":  {in: frame(9, "x"), errSubstr: "unknown frame type 9"},
		"bad exit":      {in: frame(4, "x1"), errSubstr: "malformed exit frame"},
		"huge exit":     {in: frame(4, strings.Repeat("1", 40)), errSubstr: "malformed exit frame"},
		"empty":         {in: "", wantErr: io.ErrUnexpectedEOF},
		"after the end": {in: frame(4, "0") + frame(1, "ignored"), code: 0, exited: true},
	} {
		var out, errb bytes.Buffer
		code, exited, err := ReadFrames(strings.NewReader(c.in), &out, &errb)
		switch {
		case c.wantErr != nil && !errors.Is(err, c.wantErr),
			c.errSubstr != "" && (err == nil || !strings.Contains(err.Error(), c.errSubstr)),
			c.wantErr == nil && c.errSubstr == "" && err != nil:
			t.Errorf("%s: error %v", name, err)
		}
		if out.String() != c.out || errb.String() != c.errs || code != c.code || exited != c.exited {
			t.Errorf("%s: stdout %q, stderr %q, exit %d (%v)", name, out.String(), errb.String(), code, exited)
		}
	}
	// A writer that fails is written no more, and the stream is still read
	// to its status.
	code, exited, err := ReadFrames(strings.NewReader(frame(1, "a")+frame(1, "b")+frame(4, "2")), failing{}, io.Discard)
	if err != nil || !exited || code != 2 {
		t.Errorf("failing writer: exit %d (%v), %v", code, exited, err)
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestServingFailed: Failed names why a serving connection could not be
// made, and nothing while it is being made, once it is, or when a
// release ended it.
func TestServingFailed(t *testing.T) {
	pending := NewServing()
	if err := pending.Failed(); err != nil {
		t.Errorf("a handshake under way: %v", err)
	}
	released := NewServing()
	released.Finish(nil, ErrReleased)
	if err := released.Failed(); err != nil {
		t.Errorf("released: %v", err)
	}
	failed := NewServing()
	failed.Finish(nil, errors.New("no hello"))
	if failed.Finish(nil, ErrReleased) {
		t.Error("a second Finish recorded its outcome")
	}
	if err := failed.Failed(); err == nil || err.Error() != "no hello" {
		t.Errorf("no hello: %v", err)
	}
	a, b := net.Pipe()
	defer b.Close()
	sess, err := yamux.Client(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	served := NewServing()
	served.Finish(sess, nil)
	if err := served.Failed(); err != nil {
		t.Errorf("serving: %v", err)
	}
}
