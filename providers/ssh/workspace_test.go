package ssh_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/tarsafe"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func sh(t *testing.T, l *sandbox.Lease, script string) string {
	t.Helper()
	env := map[string]string{}
	for k, v := range l.Environment().Defaults {
		env[k] = v
	}
	for k, v := range l.Environment().Fixed {
		env[k] = v
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env}, 1<<20)
	if err != nil || !res.Status.Success() {
		t.Fatalf("%q: %+v, %v, stderr %q", script, res.Status, err, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestWorkspaceCopy checks copy mode on the host: the directory is copied
// in without .outpost, the caller's directory is untouched while the
// sandbox works, and the release copies back exactly what the sandbox
// changed — new, modified, deleted, mode changes — keeping the host's
// side of a conflict and refusing escaping links and writes to .outpost
// (the docker provider's rules, internal/workspace).
func TestWorkspaceCopy(t *testing.T) {
	srv := sshtest.Shared(t)
	host := t.TempDir()
	write(t, host, "a.txt", "one\n")
	write(t, host, "sub/b.sh", "#!/bin/sh\n")
	write(t, host, "del.txt", "delete me\n")
	write(t, host, "host-edit.txt", "host v1\n")
	write(t, host, "both.txt", "base\n")
	write(t, host, "gone/x.txt", "x\n")
	write(t, host, ".outpost/.env", "SECRET=s3cr3t\n")
	if err := os.Symlink("a.txt", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	l, err := sandbox.Acquire(t.Context(), sshtest.Provider(t, srv), driver.Options{Workdir: host})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if got := sh(t, l, "cat a.txt; readlink link; ls -A . | tr '\\n' ' '"); got != "one\na.txt\na.txt both.txt del.txt gone host-edit.txt link sub" {
		t.Errorf("copied in: %q", got)
	}
	sh(t, l, `set -e
echo two > a.txt
mkdir -p new/deeper && echo c > new/deeper/c.txt
rm del.txt
rm -r gone
echo sandbox > both.txt
chmod 755 sub/b.sh
ln -s /etc/passwd evil
ln -s new/deeper/c.txt good-link
mkdir -p .outpost && echo SECRET=stolen > .outpost/.env`)
	write(t, host, "host-edit.txt", "host v2\n")
	write(t, host, "both.txt", "host\n")
	if got := read(t, host, "a.txt"); got != "one\n" {
		t.Errorf("host changed before release: a.txt = %q", got)
	}
	err = l.Close(context.Background())
	if !errors.Is(err, driver.ErrConflict) || !errors.Is(err, tarsafe.ErrUnsafe) {
		t.Errorf("Close: %v, want ErrConflict and tarsafe.ErrUnsafe", err)
	}
	for name, want := range map[string]string{
		"a.txt":                     "two\n",
		"new/deeper/c.txt":          "c\n",
		"host-edit.txt":             "host v2\n",
		"both.txt":                  "host\n",
		"both.txt.outpost-conflict": "sandbox\n",
		".outpost/.env":             "SECRET=s3cr3t\n",
		"good-link":                 "c\n",
		"sub/b.sh":                  "#!/bin/sh\n",
	} {
		if got := read(t, host, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"del.txt", "gone", "evil"} {
		if _, err := os.Lstat(filepath.Join(host, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists on the host (%v)", name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(host, "sub/b.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode of sub/b.sh: %v %v", fi.Mode(), err)
	}
}

// TestWorkspaceSyncBetweenTurns copies back while the lease is held, then
// again: each copy writes only what changed since the last.
func TestWorkspaceSyncBetweenTurns(t *testing.T) {
	srv := sshtest.Shared(t)
	host := t.TempDir()
	write(t, host, "f", "0\n")
	l := lease(t, sshtest.Provider(t, srv), driver.Options{Workdir: host})
	sb := l.Sandbox().(*sshp.Sandbox)
	sh(t, l, "echo 1 > f")
	if err := sb.SyncWorkspace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := read(t, host, "f"); got != "1\n" {
		t.Fatalf("after sync: %q", got)
	}
	write(t, host, "f", "host\n")
	sh(t, l, "echo x > other")
	if err := sb.SyncWorkspace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, other := read(t, host, "f"), read(t, host, "other"); got != "host\n" || other != "x\n" {
		t.Errorf("after second sync: f %q, other %q", got, other)
	}
}

// TestWorkspaceRemote uses a directory of the host as the working
// directory: nothing is copied either way.
func TestWorkspaceRemote(t *testing.T) {
	srv := sshtest.Shared(t)
	srv.MustExec(t, "su", "agent", "-c", "mkdir -p /home/agent/project && echo remote > /home/agent/project/r.txt")
	p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.Workspace = sshp.Remote; o.Workdir = "/home/agent/project" })
	l := lease(t, p, driver.Options{})
	if l.Workdir() != "/home/agent/project" {
		t.Errorf("Workdir %q", l.Workdir())
	}
	if got := sh(t, l, "cat r.txt; echo made > m.txt"); got != "remote" {
		t.Errorf("in the sandbox: %q", got)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := srv.MustExec(t, "cat", "/home/agent/project/m.txt"); got != "made\n" {
		t.Errorf("the remote directory after release: %q", got)
	}
}
