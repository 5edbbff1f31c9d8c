package docker_test

import (
	"testing"

	"github.com/outposthq/outpost/internal/shim/shimtest"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestShimProcess runs the exec shim's table (the same on every provider)
// on an exec of its own and on a spare.
func TestShimProcess(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	for _, spares := range []int{-1, 0} {
		t.Run(map[int]string{-1: "exec", 0: "spare"}[spares], func(t *testing.T) {
			p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Spares = spares })
			l := lease(t, p, driver.Options{Workdir: workdir(t)})
			if spares == 0 {
				if err := l.Sandbox().(driver.Warmer).Warm(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			shimtest.Run(t, sandboxtest.ShimHarness(l, "/bin/sh"))
		})
	}
}
