package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// bigLease is a copy-mode lease of a workspace holding 72 MiB, in which
// the sandbox has written new.txt.
func bigLease(t *testing.T) (wd string, sb *docker.Sandbox) {
	t.Helper()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	wd = workdir(t)
	big := strings.Repeat("outpost copy back\n", 2<<20) // 36 MiB
	for _, name := range []string{"biga", "bigb"} {
		if err := os.WriteFile(filepath.Join(wd, name), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "echo made inside > /workspace/new.txt"}, Env: fullEnv(l)}, 1<<20)
	if err != nil || res.Status.Code != 0 {
		t.Fatalf("writing in the sandbox: %v %+v", err, res)
	}
	sb = l.Sandbox().(*docker.Sandbox)
	t.Cleanup(func() {
		dockertest.Client(t).ContainerRemove(context.Background(), sb.ContainerID(), container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	return wd, sb
}

func gone(t *testing.T, cid string) {
	t.Helper()
	if _, err := dockertest.Client(t).ContainerInspect(context.Background(), cid); !errdefs.IsNotFound(err) {
		t.Errorf("the container outlived its release (inspect: %v)", err)
	}
}

// TestCopyBackOutlivesReleaseDeadline: a release's copy back is bounded by
// its progress, not by the release's deadline. It shared that deadline, so
// a workspace that took longer to copy back than the release allowed (60
// s; a copy in had taken 70 s) lost the agent's changes.
func TestCopyBackOutlivesReleaseDeadline(t *testing.T) {
	t.Parallel()
	wd, sb := bigLease(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := sb.Close(ctx); err != nil {
		t.Errorf("Close with 150 ms of deadline for the copy back of 72 MiB: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "new.txt")); err != nil || string(b) != "made inside\n" {
		t.Errorf("the sandbox's new file on the host: %q, %v", b, err)
	}
	gone(t, sb.ContainerID())
}

// TestStalledCopyBackStillRemoves: a copy back that stops making progress
// fails the release with an error that says so, and the container is
// removed all the same. The removal shared the copy back's deadline, so a
// copy back that used it all left the container running until a later
// process's sweep.
func TestStalledCopyBackStillRemoves(t *testing.T) {
	_, sb := bigLease(t)
	// No byte within a millisecond: the engine takes longer than that to
	// start sending the archive.
	docker.SetCopyBackIdle(t, time.Millisecond)
	err := sb.Close(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no byte for 1ms") {
		t.Errorf("Close of a stalled copy back: %v, want its stall named", err)
	}
	if err != nil && strings.Contains(err.Error(), "removing") {
		t.Errorf("the removal failed too: %v", err)
	}
	gone(t, sb.ContainerID())
}
