package ssh_test

import (
	"context"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	sshtest.Main(m)
}

// The provider conformance suite runs against the real sshd in
// integration (TestSSHConformance), once for the whole module.

// lease acquires a sandbox and releases it when the test ends.
func lease(t *testing.T, p driver.Provider, opts driver.Options) *sandbox.Lease {
	t.Helper()
	if opts.Workdir == "" {
		opts.Workdir = t.TempDir()
	}
	l, err := sandbox.Acquire(t.Context(), p, opts)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

var _ = sshp.New
