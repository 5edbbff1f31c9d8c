package conversation

import (
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"
)

var idRE = regexp.MustCompile(`^c[0-9a-hjkmnp-tv-z]{22}$`)

func TestNewIDShape(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := NewID()
	after := time.Now()
	if !idRE.MatchString(id) {
		t.Fatalf("NewID() = %q, want %s", id, idRE)
	}
	if !ValidID(id) {
		t.Errorf("ValidID(%q) = false", id)
	}
	got, ok := IDTime(id)
	if !ok || got.Before(before) || got.After(after) {
		t.Errorf("IDTime(%q) = %v, %v; want between %v and %v", id, got, ok, before, after)
	}
}

func TestNewIDIncreasing(t *testing.T) {
	var g idGen
	now := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	for i := range 5000 {
		// Many ids per millisecond, a clock going back, then forward again.
		tm := now.Add(time.Duration(i/100) * time.Millisecond)
		if i%777 == 0 {
			tm = tm.Add(-time.Hour)
		}
		got = append(got, g.next(tm))
	}
	if !slices.IsSorted(got) {
		t.Error("ids are not increasing")
	}
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Error("duplicate ids")
	}
	if tm, _ := IDTime(got[len(got)-1]); !tm.Equal(now.Add(49 * time.Millisecond)) {
		t.Errorf("last id time = %v, want %v", tm, now.Add(49*time.Millisecond))
	}
	// Later milliseconds sort later, whatever the random part.
	var a, b idGen
	x, y := a.next(now), b.next(now.Add(time.Millisecond))
	if x >= y {
		t.Errorf("id of %v (%s) sorts after id of 1ms later (%s)", now, x, y)
	}
}

func TestNewIDRandOverflow(t *testing.T) {
	g := idGen{ms: 1000, rand: idRandMask}
	id := g.next(time.UnixMilli(1000))
	if tm, _ := IDTime(id); tm.UnixMilli() != 1001 {
		t.Errorf("after an exhausted millisecond, id time = %d ms, want 1001", tm.UnixMilli())
	}
}

func TestNewIDConcurrent(t *testing.T) {
	const workers, each = 8, 500
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			local := make([]string, 0, each)
			for range each {
				local = append(local, NewID())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if seen[id] {
					t.Errorf("duplicate id %s", id)
				}
				seen[id] = true
			}
		})
	}
	wg.Wait()
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"c01m8mee887deapmgz08rxq": true,
		"abc":                     true,
		"a-b_c9":                  true,
		"0":                       true,
		"":                        false,
		"-abc":                    false,
		"_abc":                    false,
		"ABC":                     false,
		"a.b":                     false,
		"a/b":                     false,
		"..":                      false,
		"a b":                     false,
		"é":                       false,
		string(make([]byte, 129)): false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
	long := make([]byte, 128)
	for i := range long {
		long[i] = 'a'
	}
	if !ValidID(string(long)) {
		t.Error("ValidID of 128 letters = false")
	}
}

func TestIDTimeOther(t *testing.T) {
	for _, id := range []string{"", "abc", "x01m8mee887deapmgz08rxq", "c01m8mee887deapmgz08rxi", "c01m8mee887deapmgz08rxqq"} {
		if _, ok := IDTime(id); ok {
			t.Errorf("IDTime(%q) ok", id)
		}
	}
}
