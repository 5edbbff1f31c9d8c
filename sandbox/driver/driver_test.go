package driver_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"
)

func TestCheckPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/workspace": true, "/outpost/home/.claude": true, "/": true, "/procfs": true, "/devices/x": true, "/dev/shm/outpost-0/local/home/.echo": true, "/dev/shm": true, "/dev/shmx": false,
		"": false, "relative": false, "/a/../b": false, "/a/": false, "/a//b": false, "/a\x00b": false,
		"/proc": false, "/proc/1/environ": false, "/sys/x": false, "/dev": false, "/dev/null": false,
	} {
		err := driver.CheckPath(p)
		if ok != (err == nil) || (err != nil && !errors.Is(err, driver.ErrPath)) {
			t.Errorf("CheckPath(%q) = %v, want ok=%v (wrapping driver.ErrPath)", p, err, ok)
		}
	}
}

func TestUnreachable(t *testing.T) {
	own := driver.Unreachable("p: the host does not answer")
	err := fmt.Errorf("%w at h: refused", own)
	if !errors.Is(err, own) || !errors.Is(err, driver.ErrUnreachable) {
		t.Errorf("%v is not both its provider's sentinel and driver.ErrUnreachable", err)
	}
	if err.Error() != "p: the host does not answer at h: refused" {
		t.Errorf("text %q", err)
	}
	if errors.Is(driver.ErrUnreachable, own) || errors.Is(driver.Unreachable("q"), own) {
		t.Error("a provider's sentinel is not another's")
	}
}
