package cli

import (
	"strings"
	"testing"
)

// TestCheckBubblewrap: without bwrap on the PATH the check warns that
// local leases cannot run isolated and says how to install it.
func TestCheckBubblewrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c := checkBubblewrap()
	if c.Status != DoctorWarn || !strings.Contains(c.Message, "cannot run isolated") || !strings.Contains(c.Fix, "bubblewrap") {
		t.Errorf("checkBubblewrap() without bwrap = %+v", c)
	}
}
