package ssh_test

import (
	"context"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	sshtest.Main(m)
}

// TestConformance runs the provider conformance suite against a real
// OpenSSH server.
func TestConformance(t *testing.T) {
	srv := sshtest.Shared(t)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider { return sshtest.Provider(t, srv) },
	})
}

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
