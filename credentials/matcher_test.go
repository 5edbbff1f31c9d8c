package credentials

import (
	"fmt"
	"strings"
	"testing"
)

// TestMatcherSizedByPatterns: a matcher of a few patterns (a turn's
// redactor: each running turn holds its own) keeps a small lead filter,
// not 8 KiB, and finds what the one of many patterns finds: every
// occurrence, overlapping ones included.
func TestMatcherSizedByPatterns(t *testing.T) {
	if m := newMatcher([]string{"sk-secret-one", "c2stc2VjcmV0", "token-two"}); len(m.lead)*8 > 512 {
		t.Errorf("a matcher of 3 patterns keeps a lead filter of %d bytes, want 512", len(m.lead)*8)
	}

	var many []string
	for i := range 2000 {
		many = append(many, fmt.Sprintf("secret-%04d-xyz", i))
	}
	text := strings.Repeat("..secret-0042-xyz..secret-1999-xyzsecret-0000-xyz..", 3) + "secret-004"
	for _, pats := range [][]string{many, {"secret-0042-xyz", "secret-1999-xyz", "secret-0000-xyz"}, {"ret-1999-xyzsec", "secret-1999-xyz"}} {
		m := newMatcher(pats)
		got := matchFrom(m, text, nil, false)
		var want []span
		for i := range text {
			for _, p := range pats {
				if strings.HasPrefix(text[i:], p) {
					want = append(want, span{i, i + len(p)})
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%d patterns: found %v, want %v", len(pats), got, want)
		}
	}
}
