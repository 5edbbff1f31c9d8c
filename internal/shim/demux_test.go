package shim

import (
	"bytes"
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"testing"
)

func TestDemux(t *testing.T) {
	t.Run("handshake, then the program's output", func(t *testing.T) {
		var out, errb bytes.Buffer
		var got Handshake
		calls, ups := 0, 0
		d := NewDemux(&out, &errb, func(h Handshake, err error) {
			calls++
			got = h
			if err != nil || out.Len() > 0 || errb.Len() > 0 {
				t.Errorf("handshake %v with output already written (%q, %q)", err, out.String(), errb.String())
			}
		}, func() { ups++ })
		d.Stderr().Write([]byte("early stderr\n")) // held: the handshake is not known
		if errb.Len() != 0 {
			t.Errorf("stderr passed before the handshake: %q", errb.String())
		}
		d.Stdout().Write([]byte(handshake + "ok 4"))
		d.Stdout().Write([]byte("2\nfirst"))
		d.Stdout().Write([]byte(" second"))
		d.Stderr().Write([]byte("late\n"))
		if _, ok := d.End(); !ok {
			t.Fatal("End: no handshake")
		}
		if calls != 1 || got.PID != 42 || got.StartErr("p") != nil {
			t.Errorf("%d calls, handshake %+v", calls, got)
		}
		if out.String() != "first second" || errb.String() != "early stderr\nlate\n" || ups == 0 {
			t.Errorf("stdout %q, stderr %q, up %d times", out.String(), errb.String(), ups)
		}
	})
	t.Run("stderr held to the end", func(t *testing.T) {
		var out, errb bytes.Buffer
		d := NewDemux(&out, &errb, func(Handshake, error) {}, nil)
		d.Stderr().Write([]byte("before"))
		d.Stdout().Write([]byte(handshake + "ok 7\n"))
		d.End()
		if errb.String() != "before" {
			t.Errorf("stderr %q", errb.String())
		}
	})
	t.Run("no handshake", func(t *testing.T) {
		d := NewDemux(&bytes.Buffer{}, &bytes.Buffer{}, func(Handshake, error) { t.Error("handshake called") }, nil)
		d.Stdout().Write([]byte("exec failed"))
		d.Stderr().Write([]byte("no such file"))
		if written, ok := d.End(); ok || written != "exec failed no such file" {
			t.Errorf("End = %q, %v", written, ok)
		}
	})
	t.Run("not the shim", func(t *testing.T) {
		var err error
		d := NewDemux(&bytes.Buffer{}, &bytes.Buffer{}, func(_ Handshake, e error) { err = e }, nil)
		d.Stdout().Write([]byte("OCI runtime exec failed\n"))
		if err == nil {
			t.Error("a line that is no handshake was taken for one")
		}
	})
	t.Run("too long", func(t *testing.T) {
		d := NewDemux(&bytes.Buffer{}, &bytes.Buffer{}, func(Handshake, error) {}, nil)
		if _, err := d.Stdout().Write(bytes.Repeat([]byte("x"), maxHeld+1)); err == nil || !strings.Contains(err.Error(), "64 KiB") {
			t.Errorf("Write of 64 KiB without a newline: %v", err)
		}
	})
}

func TestHandshakeStartErr(t *testing.T) {
	if err := (Handshake{Err: ErrNotFound}).StartErr("prog"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("not found: %v", err)
	}
	if err := (Handshake{Err: ErrNoDir}).StartErr("prog"); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNoDir) {
		t.Errorf("no dir: %v", err)
	}
	if err := (Handshake{Err: ErrStart}).StartErr("prog"); !errors.Is(err, ErrStart) {
		t.Errorf("start: %v", err)
	}
}
