package server

import "testing"

// TestLimitsFor: the turns of one token name share its window; a name
// without a limit has none.
func TestLimitsFor(t *testing.T) {
	s := &Server{o: Options{TokenLimits: map[string]TokenLimit{"ci": {PerHour: 10}, "zero": {}}}}
	a, b := s.limitsFor("ci"), s.limitsFor("ci")
	if len(a) != 1 || len(b) != 1 || a[0] != b[0] {
		t.Fatalf("limits %v and %v, want one shared window", a, b)
	}
	a[0].Spend(10)
	if x := b[0].Allow(0, 0); x == nil || x.Budget != "token" || x.Window != "hour" {
		t.Errorf("after 10 tokens: %+v", x)
	}
	if l := s.limitsFor("other"); l != nil {
		t.Errorf("a name without a limit: %v", l)
	}
	if l := s.limitsFor("zero"); l != nil {
		t.Errorf("a zero limit: %v", l)
	}
}
