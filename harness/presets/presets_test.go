package presets_test

import (
	"slices"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
)

// TestBuiltins: every built-in preset, listed by name so that a lookup
// builds only the one it names, returns a valid preset of that name, a
// fresh one each time; Names lists them; Register refuses a taken name and
// an invalid preset.
func TestBuiltins(t *testing.T) {
	var names []string
	for name, f := range presets.Builtin() {
		names = append(names, name)
		h := f()
		if h.Name != name {
			t.Errorf("the preset listed as %q is named %q", name, h.Name)
		}
		if err := h.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		got, ok := presets.Lookup(name)
		if !ok || got.Name != name || got == h {
			t.Errorf("Lookup(%q) = %p, %v: want a fresh preset of that name", name, got, ok)
		}
	}
	slices.Sort(names)
	if got := presets.Names(); !slices.Equal(got, names) {
		t.Errorf("Names() = %v, want %v", got, names)
	}
	if err := presets.Register(func() *harness.Harness { h, _ := presets.Lookup("echo"); return h }); err == nil {
		t.Error("Register accepted a second preset named echo")
	}
	if err := presets.Register(func() *harness.Harness { return &harness.Harness{} }); err == nil {
		t.Error("Register accepted an invalid preset")
	}
	if _, ok := presets.Lookup("no-such-preset"); ok {
		t.Error("Lookup found no-such-preset")
	}
}
