package ssh_test

import (
	"testing"

	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/shim/shimtest"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestShimProcess runs the exec shim's table (the same on every provider),
// on a lease without namespaces: in bubblewrap, a death by signal n reads
// as the exit status 128+n (bwrap passes it on so), which the table's
// rows on signals tell apart (TestIsolationSignalsAndSurvivors covers the
// signals there).
func TestShimProcess(t *testing.T) {
	srv := sshtest.Shared(t)
	l := lease(t, sshtest.Provider(t, srv, isolation(isolate.None)), driver.Options{})
	shimtest.Run(t, sandboxtest.ShimHarness(l, "/bin/sh"))
}
