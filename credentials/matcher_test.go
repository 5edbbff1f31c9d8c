package credentials

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestMatcherSizedByPatterns: a matcher of a few patterns (a turn's
// redactor: each running turn holds its own) keeps a small lead filter,
// not 8 KiB, and finds what the one of many patterns finds: every
// occurrence, overlapping ones included.
func TestMatcherSizedByPatterns(t *testing.T) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 100
	keep := make([]*matcher, n)
	for i := range keep {
		keep[i] = newMatcher([]string{"sk-secret-one", "c2stc2VjcmV0", "token-two"})
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 2<<10 {
		t.Errorf("a matcher of 3 patterns allocated %d bytes, want under 2 KiB", per)
	}
	runtime.KeepAlive(keep)

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
