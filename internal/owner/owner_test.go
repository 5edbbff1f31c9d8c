package owner_test

import (
	"os/exec"
	"testing"

	"github.com/outposthq/outpost/internal/owner"
)

func TestLiveness(t *testing.T) {
	me := owner.Self()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	for name, c := range map[string]struct {
		o    owner.Owner
		want owner.Liveness
	}{
		"self":                {me, owner.Alive},
		"dead pid":            {owner.Owner{PID: dead, Start: 1, Boot: me.Boot, PidNS: me.PidNS, Host: me.Host}, owner.Dead},
		"reused pid":          {owner.Owner{PID: me.PID, Start: me.Start + 1, Boot: me.Boot, PidNS: me.PidNS, Host: me.Host}, owner.Dead},
		"rebooted":            {owner.Owner{PID: me.PID, Start: me.Start, Boot: "old-boot", PidNS: me.PidNS, Host: me.Host}, owner.Dead},
		"other machine":       {owner.Owner{PID: 1, Boot: "other-boot", Host: "elsewhere"}, owner.Unknown},
		"other pid namespace": {owner.Owner{PID: 1, Boot: me.Boot, PidNS: "pid:[1]", Host: me.Host}, owner.Unknown},
		"empty":               {owner.Owner{}, owner.Unknown},
	} {
		if got := c.o.Liveness(); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
}

func TestLabelsRoundTrip(t *testing.T) {
	o := owner.Owner{PID: 42, Start: 7, Boot: "b", PidNS: "pid:[1]", Host: "h"}
	l := o.Labels("x.")
	if l["x."+owner.KeyPID] != "42" || l["x."+owner.KeyHost] != "h" || len(l) != 5 {
		t.Fatalf("Labels = %v", l)
	}
	if got := owner.FromLabels("x.", l); got != o {
		t.Fatalf("FromLabels = %+v, want %+v", got, o)
	}
	if got := owner.FromLabels("x.", map[string]string{"x." + owner.KeyPID: "nope"}); got != (owner.Owner{}) {
		t.Fatalf("FromLabels of a malformed pid = %+v", got)
	}
}
