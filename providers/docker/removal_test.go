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
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestCopyBackOutOfTimeStillRemoves: a release whose deadline runs out
// while the workspace is copied back still removes the container. The
// copy back and the removal shared one deadline, so a copy back that used
// it all (a large workspace: 60 s was not enough for a copy in that took
// 70 s) left the container running until a later process's sweep.
func TestCopyBackOutOfTimeStillRemoves(t *testing.T) {
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	wd := workdir(t)
	// Enough to copy that the copy back cannot finish in the deadline below.
	big := strings.Repeat("outpost copy back\n", 2<<20) // 36 MiB
	for i := range 2 {
		f := filepath.Join(wd, "big"+string(rune('a'+i)))
		if err := os.WriteFile(f, []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := p.Open(t.Context(), driver.Options{Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	cid := sb.(*docker.Sandbox).ContainerID()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err = sb.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "copying the workspace") {
		t.Errorf("Close with 150 ms for the copy back of 72 MiB: %v, want the copy back's error", err)
	}
	if err != nil && strings.Contains(err.Error(), "removing") {
		t.Errorf("the removal failed too: %v", err)
	}
	if _, err := dockertest.Client(t).ContainerInspect(context.Background(), cid); !errdefs.IsNotFound(err) {
		t.Errorf("the container outlived its release (inspect: %v)", err)
		dockertest.Client(t).ContainerRemove(context.Background(), cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
}
