package testenv

import (
	"flag"
	"strconv"
	"testing"
)

// TestDefaultParallel: the number given is the one in force unless the
// command line set -test.parallel, whose value then stands.
func TestDefaultParallel(t *testing.T) {
	want := 7
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			want, _ = strconv.Atoi(f.Value.String())
		}
	})
	if got := DefaultParallel(7); got != want {
		t.Errorf("DefaultParallel(7) = %d, want %d", got, want)
	}
	if got := flag.Lookup("test.parallel").Value.String(); got != strconv.Itoa(want) {
		t.Errorf("-test.parallel is %s, want %d", got, want)
	}
}
