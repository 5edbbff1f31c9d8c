package kubernetes

import (
	"testing"

	"github.com/outposthq/outpost/internal/shim/shimtest"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestShimProcess runs the exec shim's table (the same on every provider)
// in a pod: its processes as streams of the lease's serving exec (the
// default, which TestConformance covers too), and each an exec of its own
// (exec_each).
func TestShimProcess(t *testing.T) {
	c := kubetest.Parallel(t)
	for _, execEach := range []bool{false, true} {
		t.Run(map[bool]string{false: "served", true: "exec_each"}[execEach], func(t *testing.T) {
			shimtest.Run(t, sandboxtest.ShimHarness(busyboxLease(t, c, execEach), "/bin/sh"))
		})
	}
}
