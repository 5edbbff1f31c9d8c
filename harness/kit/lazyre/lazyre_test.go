package lazyre_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

func TestRegexp(t *testing.T) {
	re := lazyre.New(`(\d+)([a-z])`)
	if re.String() != `(\d+)([a-z])` {
		t.Errorf("String() = %q", re.String())
	}
	if !re.MatchString("x 12h") || re.MatchString("nothing") {
		t.Error("MatchString")
	}
	if diff := cmp.Diff([]string{"12h", "12", "h"}, re.FindStringSubmatch("x 12h 3m")); diff != "" {
		t.Errorf("FindStringSubmatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"12h", "12", "h"}, {"3m", "3", "m"}}, re.FindAllStringSubmatch("12h 3m", -1)); diff != "" {
		t.Errorf("FindAllStringSubmatch (-want +got):\n%s", diff)
	}
	if got := re.ReplaceAllString("12h 3m", "$2"); got != "h m" {
		t.Errorf("ReplaceAllString = %q", got)
	}
	if re.Re() != re.Re() {
		t.Error("Re compiled twice")
	}
}

func TestInvalidPanicsOnFirstUse(t *testing.T) {
	re := lazyre.New(`(`) // no panic here: nothing is compiled yet
	defer func() {
		if recover() == nil {
			t.Error("an invalid expression did not panic on first use")
		}
	}()
	re.MatchString("x")
}
