package ssh_test

import (
	"testing"

	"github.com/outposthq/outpost/internal/shim/shimtest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestShimProcess runs the exec shim's table (the same on every provider).
func TestShimProcess(t *testing.T) {
	srv := sshtest.Shared(t)
	l := lease(t, sshtest.Provider(t, srv), driver.Options{})
	shimtest.Run(t, sandboxtest.ShimHarness(l, "/bin/sh"))
}
