package sandbox_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestInstall: the library's "install as a turn would" installs the
// pinned CLI and checks that it runs (echo: outpost's own binary), with
// coded errors for an unknown name; CacheMounts asks for nothing on a
// sandbox that shares the host's filesystem.
func TestInstall(t *testing.T) {
	p := local.New(&local.Options{BaseDir: t.TempDir()})
	// Self stands in for outpost's own binary: this test binary would run
	// the tests again when asked for its version.
	self := filepath.Join(t.TempDir(), "outpost")
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho \"outpost $1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := &bootstrap.Installer{CacheDir: t.TempDir(), Self: self}
	if m := sandbox.CacheMounts(inst, p.Capabilities(), "claude"); m != nil {
		t.Errorf("CacheMounts on local = %v, want none", m)
	}
	if m := sandbox.CacheMounts(inst, driver.Capabilities{Isolated: true}, ""); m != nil {
		t.Errorf("CacheMounts without a CLI = %v, want none", m)
	}
	lease, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(t.Context())

	got, err := sandbox.Install(t.Context(), lease, inst, "echo", nil)
	if err != nil {
		t.Fatalf("Install(echo): %v", err)
	}
	if diff := cmp.Diff(bootstrap.SourceSelf, got.Source); diff != "" || got.Check != "outpost version" {
		t.Errorf("Install(echo) = %+v: source (-want +got) %s, check %q", got, diff, got.Check)
	}

	_, err = sandbox.Install(t.Context(), lease, inst, "no-such-cli", nil)
	if outpost.CodeOf(err) != outpost.Bootstrap {
		t.Errorf("Install(unknown) = %v, want code bootstrap", err)
	}
}
