package cli

import (
	"strings"
	"testing"
)

// TestCheckBubblewrap: without bwrap on the PATH the check warns, loudly,
// that local leases run on the host (isolation=auto, the default, falls
// back) and says how to install it; with isolation=none asked it is a
// fact, not a warning.
func TestCheckBubblewrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c := checkBubblewrap("")
	if c.Status != DoctorWarn || !strings.Contains(c.Message, "LOCAL TURNS ARE NOT ISOLATED") || !strings.Contains(c.Message, "isolation=auto runs them on the host") || !strings.Contains(c.Fix, "bubblewrap") {
		t.Errorf("checkBubblewrap(default) without bwrap = %+v", c)
	}
	if c := checkBubblewrap("none"); c.Status != DoctorInfo || !strings.Contains(c.Message, "isolation=none") {
		t.Errorf("checkBubblewrap(none) = %+v", c)
	}
}
