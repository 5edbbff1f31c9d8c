package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// TestLeaseErrorsAreCoded checks that the portable layer codes every
// driver error once, keeps its cause for errors.Is, and reports a vanished
// sandbox as code sandbox with details.vanished whatever the operation.
func TestLeaseErrorsAreCoded(t *testing.T) {
	p := memsandbox.New(nil)
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	wd, _ := os.Getwd()
	if l.Workdir() != wd {
		t.Errorf("Workdir %q, want the current directory %q (the portable layer's default)", l.Workdir(), wd)
	}
	env := l.Environment().Fixed
	var okTar bytes.Buffer
	if err := tarsafe.Write(&okTar, []tarsafe.File{{Name: "ok", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error, code outpost.Code, cause error, vanished bool) {
		t.Helper()
		var oe *outpost.Error
		if !errors.As(err, &oe) {
			t.Errorf("%s: %v, want an *outpost.Error", name, err)
			return
		}
		if oe.Code != code {
			t.Errorf("%s: code %q, want %q (%v)", name, oe.Code, code, err)
		}
		if cause != nil && !errors.Is(err, cause) {
			t.Errorf("%s: %v, want it to wrap %v", name, err, cause)
		}
		if got, _ := oe.Details["vanished"].(bool); got != vanished {
			t.Errorf("%s: details.vanished %v, want %v (%v)", name, got, vanished, err)
		}
	}

	_, err = l.CopyOut(t.Context(), l.Home()+"/missing")
	check("CopyOut of a missing path", err, outpost.Sandbox, fs.ErrNotExist, false)
	_, err = l.List(t.Context(), l.Home()+"/missing")
	check("List of a missing directory", err, outpost.Sandbox, fs.ErrNotExist, false)
	_, err = l.LookPath(t.Context(), "no-such-program")
	check("LookPath of a missing program", err, outpost.Sandbox, exec.ErrNotFound, false)
	for _, bad := range []string{"relative", l.Home() + "/../x", "/proc/1", "/dev/null"} {
		err = l.CopyIn(t.Context(), bad, bytes.NewReader(okTar.Bytes()))
		check("CopyIn into "+bad, err, outpost.Sandbox, driver.ErrPath, false)
		_, err = l.CopyOut(t.Context(), bad)
		check("CopyOut of "+bad, err, outpost.Sandbox, driver.ErrPath, false)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = l.Exec(ctx, driver.ExecRequest{Path: "echo", Env: env}, 0)
	check("Exec with an ended context", err, outpost.Cancelled, context.Canceled, false)

	if err := p.Remove(l.ID()); err != nil {
		t.Fatal(err)
	}
	_, err = l.Exec(t.Context(), driver.ExecRequest{Path: "echo", Env: env}, 0)
	check("Exec in a vanished sandbox", err, outpost.Sandbox, driver.ErrVanished, true)
	err = l.CopyIn(t.Context(), l.Home(), bytes.NewReader(okTar.Bytes()))
	check("CopyIn in a vanished sandbox", err, outpost.Sandbox, driver.ErrVanished, true)
	_, err = l.SnapshotWorkspace(t.Context(), 10)
	check("SnapshotWorkspace of a vanished sandbox", err, outpost.Sandbox, driver.ErrVanished, true)
	_, err = l.CopyOut(t.Context(), l.Home())
	check("CopyOut in a vanished sandbox", err, outpost.Sandbox, driver.ErrVanished, true)

	l.Close(context.Background())
	_, err = l.Exec(t.Context(), driver.ExecRequest{Path: "echo", Env: env}, 0)
	check("Exec after Close", err, outpost.Sandbox, sandbox.ErrClosed, false)
	err = l.CopyIn(t.Context(), "/", bytes.NewReader(okTar.Bytes()))
	check("CopyIn after Close", err, outpost.Sandbox, sandbox.ErrClosed, false)
}

// TestCopyInUnsafeIsConfiguration checks that a tar stream CopyIn refuses
// is the caller's input at fault (configuration), still wrapping
// tarsafe.ErrUnsafe.
func TestCopyInUnsafeIsConfiguration(t *testing.T) {
	l, err := sandbox.Acquire(t.Context(), memsandbox.New(nil), driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o600, Size: 1, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("x"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	err = l.CopyIn(t.Context(), l.Home(), &buf)
	if !errors.Is(err, tarsafe.ErrUnsafe) || outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("CopyIn of an escaping entry: %v (code %q), want configuration wrapping tarsafe.ErrUnsafe", err, outpost.CodeOf(err))
	}
}
