package driver_test

import (
	"errors"
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
