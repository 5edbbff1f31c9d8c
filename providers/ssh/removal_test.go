package ssh_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// bigLease is a copy-mode lease of a workspace holding 72 MiB, in which
// the sandbox has written new.txt.
func bigLease(t *testing.T) (*sshtest.Server, string, *sshp.Sandbox) {
	t.Helper()
	srv := sshtest.Shared(t)
	host := t.TempDir()
	big := strings.Repeat("outpost copy back\n", 2<<20) // 36 MiB
	write(t, host, "biga", big)
	write(t, host, "bigb", big)
	l, err := sandbox.Acquire(t.Context(), sshtest.Provider(t, srv), driver.Options{Workdir: host})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, l, "echo made inside > new.txt")
	return srv, host, l.Sandbox().(*sshp.Sandbox)
}

// TestCopyBackOutlivesReleaseDeadline: a release's copy back is bounded by
// its progress (driver.ProgressBound), not by the release's deadline: it
// shared that deadline, so a workspace that took longer to copy back than
// the release allowed lost the agent's changes. The directory is removed
// after it, with a bound of its own.
func TestCopyBackOutlivesReleaseDeadline(t *testing.T) {
	srv, host, sb := bigLease(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := sb.Close(ctx); err != nil {
		t.Errorf("Close with 150 ms of deadline for the copy back of 72 MiB: %v", err)
	}
	if got := read(t, host, "new.txt"); got != "made inside\n" {
		t.Errorf("the sandbox's new file on the host: %q", got)
	}
	if dirExists(t, srv, sb.Dir()) {
		t.Errorf("the lease's directory %s outlived its release:\n%s", sb.Dir(), leftIn(t, srv, sb.Dir()))
	}
}

// leftIn lists what a lease directory that outlived its release holds, with
// times and the host's processes: which writer raced the removal.
func leftIn(t *testing.T, srv *sshtest.Server, dir string) string {
	t.Helper()
	_, out, err := srv.Exec(context.Background(), "sh", "-c", "date '+now %T.%N'; find \"$1\" -printf '%TT %y %p\\n' | head -50; ps -eo pid,ppid,etime,args | head -40", "sh", dir)
	if err != nil {
		return err.Error()
	}
	return out
}

// TestStalledCopyBackStillRemoves: a copy back that makes no progress
// fails the release with an error that says so, and the lease's directory
// is removed all the same.
func TestStalledCopyBackStillRemoves(t *testing.T) {
	srv, _, sb := bigLease(t)
	old := driver.CopyBackIdle
	t.Cleanup(func() { driver.CopyBackIdle = old })
	driver.CopyBackIdle = time.Millisecond // the host takes longer than that to send a byte
	err := sb.Close(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no byte for 1ms") {
		t.Errorf("Close of a stalled copy back: %v, want its stall named", err)
	}
	if err != nil && strings.Contains(err.Error(), "removing") {
		t.Errorf("the removal failed too: %v", err)
	}
	if dirExists(t, srv, sb.Dir()) {
		t.Errorf("the lease's directory %s outlived its release:\n%s", filepath.Clean(sb.Dir()), leftIn(t, srv, sb.Dir()))
	}
}
