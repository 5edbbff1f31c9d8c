package plural

import "testing"

func TestN(t *testing.T) {
	for _, tc := range []struct {
		n    int
		word string
		want string
	}{
		{0, "problem", "0 problems"},
		{1, "problem", "1 problem"},
		{2, "problem", "2 problems"},
		{1, "turn", "1 turn"},
	} {
		if got := N(tc.n, tc.word); got != tc.want {
			t.Errorf("N(%d, %q) = %q, want %q", tc.n, tc.word, got, tc.want)
		}
	}
	if got := Of(3, "lease", "leases"); got != "3 leases" {
		t.Errorf("Of = %q", got)
	}
}
