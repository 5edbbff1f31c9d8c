package ssh_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestMirror: a mount's content-addressed directory is mirrored on the
// host on first use (verified there), and found there by the next lease
// without the local copy; other paths are not shown.
func TestMirror(t *testing.T) {
	srv := sshtest.Shared(t)
	src := t.TempDir()
	name := "sha512-" + strings.Repeat("ab", 64)
	tree := filepath.Join(src, name)
	os.MkdirAll(filepath.Join(tree, "pkg"), 0o755)
	os.WriteFile(filepath.Join(tree, "pkg", "x"), []byte("#!/bin/sh\necho mirrored\n"), 0o555)
	os.MkdirAll(filepath.Join(tree, "bin"), 0o755)
	os.Symlink("../pkg/x", filepath.Join(tree, "bin", "x"))
	os.MkdirAll(filepath.Join(src, "other"), 0o755)
	p := sshtest.Provider(t, srv)
	open := func() *sshp.Sandbox {
		sb, err := p.Open(t.Context(), driver.Options{Workdir: t.TempDir(), Mounts: []driver.Mount{{Source: src, Target: "/opt/x"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(t.Context()) })
		return sb.(*sshp.Sandbox)
	}
	s := open()
	root, ok := s.HostPath(src)
	if !ok || !strings.HasSuffix(root, "/.outpost/trees") {
		t.Fatalf("HostPath(mount) = %q, %v", root, ok)
	}
	exe, ok := s.HostPath(filepath.Join(tree, "bin", "x"))
	if !ok || exe != root+"/"+name+"/bin/x" {
		t.Fatalf("HostPath(tree/bin/x) = %q, %v (%v)", exe, ok, s.HostPathError())
	}
	pr, err := s.Start(t.Context(), driver.ExecRequest{Path: exe, Env: env(s)})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 64)
	n, _ := pr.Stdout().Read(out)
	if st, err := pr.Wait(); err != nil || !st.Success() || string(out[:n]) != "mirrored\n" {
		t.Errorf("running the mirrored program: %+v, %v, %q", st, err, out[:n])
	}
	if got := srv.MustExec(t, "cat", strings.TrimPrefix(root, "")+"/"+name+".sum"); len(strings.TrimSpace(got)) != 128 {
		t.Errorf("the verified sum on the host: %q", got)
	}
	if _, ok := s.HostPath(filepath.Join(src, "other")); ok {
		t.Error("a directory that is not content-addressed is shown")
	}
	// The next lease finds it on the host: the local tree is not read.
	if err := os.RemoveAll(tree); err != nil {
		t.Fatal(err)
	}
	if got, ok := open().HostPath(filepath.Join(tree, "bin", "x")); !ok || got != exe {
		t.Errorf("second lease: HostPath = %q, %v", got, ok)
	}
}

// TestList lists a lease's regular files without following links.
func TestList(t *testing.T) {
	srv := sshtest.Shared(t)
	sb, err := sshtest.Provider(t, srv).Open(t.Context(), driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	s := sb.(*sshp.Sandbox)
	d := s.Home() + "/listed"
	srv.MustExec(t, "su", "agent", "-c", "mkdir -p "+d+"/a/b && touch "+d+"/x '"+d+"/a/b/y z' && ln -s /etc "+d+"/link && ln -s x "+d+"/l2")
	got, err := s.List(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if strings.Join(got, "|") != "a/b/y z|x" {
		t.Errorf("List = %q", got)
	}
	if _, err := s.List(t.Context(), d+"/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of a missing directory: %v", err)
	}
}
