package driver_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/sandbox/driver"
)

// TestHomeEnv: HomeVars names HomeEnv's variables, and HomeDirs makes
// every directory HomeEnv points to, each parent first.
func TestHomeEnv(t *testing.T) {
	env := driver.HomeEnv("/h", "/t")
	want := map[string]string{
		"HOME": "/h", "XDG_CONFIG_HOME": "/h/.config", "XDG_DATA_HOME": "/h/.local/share",
		"XDG_STATE_HOME": "/h/.local/state", "XDG_CACHE_HOME": "/h/.cache", "TMPDIR": "/t",
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("HomeEnv (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR"}, driver.HomeVars()); diff != "" {
		t.Errorf("HomeVars (-want +got):\n%s", diff)
	}
	dirs := driver.HomeDirs("home", "tmp")
	if diff := cmp.Diff([]string{"home", "home/.config", "home/.local", "home/.local/share", "home/.cache", "home/.local/state", "tmp"}, dirs); diff != "" {
		t.Errorf("HomeDirs (-want +got):\n%s", diff)
	}
	made := driver.HomeDirs("/h", "/t")
	for _, v := range slices.Sorted(maps.Values(env)) {
		if !slices.Contains(made, v) {
			t.Errorf("HomeDirs does not make %s", v)
		}
	}
}
