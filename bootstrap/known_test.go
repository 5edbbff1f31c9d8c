package bootstrap_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
)

// TestInstallerKnown: an installer answers for its own pins, not the
// global ones: custom Pins make "fakecli" known and the built-in npm and
// archive names unknown; the pins of kind self (outpost's own binary, the
// echo agent) belong to every installer, and install nothing through the
// cache.
func TestInstallerKnown(t *testing.T) {
	t.Setenv(bootstrap.PinsVariable, "")
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", "https://example.invalid/f.tgz", digestOf(nil), ""), Self: "/opt/outpost/bin/outpost"}
	for name, want := range map[string]bool{"fakecli": true, "echo": true, "claude": false, "antigravity": false, "": false, "nope": false} {
		if got := inst.Known(name); got != want {
			t.Errorf("Known(%q) = %v, want %v", name, got, want)
		}
	}
	if got := inst.Names(); !slices.Equal(got, []string{"echo", "fakecli"}) {
		t.Errorf("Names = %v", got)
	}
	if !inst.Cached("fakecli") || inst.Cached("echo") || inst.Cached("nope") {
		t.Error("Cached: only downloaded pins go through the cache")
	}
	if pin, ok := inst.Pin("echo"); !ok || pin.Kind != bootstrap.KindSelf {
		t.Errorf("Pin(echo) = %+v, %v", pin, ok)
	}
	// Outpost's own binary on a sandbox sharing the host's filesystem,
	// whatever its PATH holds.
	tg := newTarget(t, false)
	if p, err := inst.Ensure(context.Background(), tg, "echo", "outpost", nil); err != nil || p != inst.Self {
		t.Errorf("Ensure(echo) = %q, %v; want %s", p, err, inst.Self)
	}
	if _, err := inst.Ensure(context.Background(), tg, "claude", "claude", nil); !errors.Is(err, bootstrap.ErrUnknown) {
		t.Errorf("Ensure(claude) with custom pins = %v, want ErrUnknown", err)
	}
	// The global answers with the default pins.
	if !bootstrap.Known("claude") || bootstrap.Known("fakecli") || !slices.Contains(bootstrap.Names(), "echo") {
		t.Error("the default pins' Known or Names is wrong")
	}
}
