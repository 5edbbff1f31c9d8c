package cli

import (
	"strings"
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
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

// noter is a provider that says why its leases run without isolation.
type noter struct {
	driver.Provider
	note string
}

func (n noter) IsolationNote() string { return n.note }

// TestCheckRemoteIsolation: doctor's isolation check of an ssh host:
// namespaces are ok, auto without them warns in capitals with a fix,
// none asked is a fact; providers without the question get no check.
func TestCheckRemoteIsolation(t *testing.T) {
	p := memsandbox.New(nil)
	if _, ok := checkRemoteIsolation("memory", p, p.Capabilities()); ok {
		t.Error("a provider without IsolationNote got an isolation check")
	}
	for _, tc := range []struct {
		iso, note, status, want string
	}{
		{driver.IsolationNamespaces, "", DoctorOK, "namespaces on the host"},
		{driver.IsolationNone, "NOT ISOLATED: isolation=auto runs the leases on the ssh host as its user: bwrap is not on the PATH", DoctorWarn, "NOT ISOLATED"},
		{driver.IsolationNone, "", DoctorInfo, "isolation=none"},
	} {
		c, ok := checkRemoteIsolation("ssh", noter{p, tc.note}, driver.Capabilities{Isolation: tc.iso})
		if !ok || c.Status != tc.status || !strings.Contains(c.Message, tc.want) || (tc.status == DoctorWarn) != (c.Fix != "") {
			t.Errorf("%s %q: %+v", tc.iso, tc.note, c)
		}
	}
}
