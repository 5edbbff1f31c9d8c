package shim

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func TestReadHandshake(t *testing.T) {
	for _, c := range []struct {
		in      string
		pid     int
		wantErr error // of Handshake.Err
		bad     bool  // ReadHandshake fails
	}{
		{in: handshake + "ok 42\nprogram output", pid: 42},
		{in: handshake + "notfound x: executable file not found in $PATH\n", wantErr: ErrNotFound},
		{in: handshake + "nodir working directory /x: no such file\n", wantErr: ErrNoDir},
		{in: handshake + "error stopped\n", wantErr: ErrStart},
		{in: handshake + "ok zero\n", bad: true},
		{in: "hello\n", bad: true},
		{in: handshake + "ok 1", bad: true}, // no newline: the stream ended
	} {
		r := bufio.NewReader(strings.NewReader(c.in))
		h, err := ReadHandshake(r)
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if h.PID != c.pid || !errors.Is(h.Err, c.wantErr) || (c.wantErr == nil && h.Err != nil) {
			t.Errorf("%q: %+v", c.in, h)
		}
		if c.pid != 0 {
			rest, _ := r.ReadString(0)
			if rest != "program output" {
				t.Errorf("after the handshake: %q", rest)
			}
		}
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("OUTPOST_SHIM_TEST_A", "a value")
	t.Setenv("OUTPOST_SHIM_TEST_B", "b")
	t.Setenv(EnvNames, `["OUTPOST_SHIM_TEST_A","OUTPOST_SHIM_TEST_UNSET","`+EnvNames+`"]`)
	got := environment()
	if len(got) != 1 || got[0] != "OUTPOST_SHIM_TEST_A=a value" {
		t.Errorf("environment() = %q", got)
	}
}

func TestArgs(t *testing.T) {
	got := ExecArgs("/b", "tok", "/run", "/w", true, "prog", []string{"-x", "--"})
	want := "/b sandbox-shim exec --token=tok --run=/run --dir=/w --stdin -- prog -x --"
	if strings.Join(got, " ") != want {
		t.Errorf("ExecArgs = %q", got)
	}
	if got := strings.Join(SignalArgs("/b", 7, "tok", "KILL"), " "); got != "/b sandbox-shim signal --pid=7 --token=tok KILL" {
		t.Errorf("SignalArgs = %q", got)
	}
}
