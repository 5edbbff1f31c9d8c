package testenv

import (
	"flag"
	"strconv"
)

// DefaultParallel makes n the number of parallel tests (go test's
// -parallel) of a test process whose command line does not set one. A
// TestMain calls it before m.Run, in a package whose parallel tests mostly
// wait on something else (a Docker Engine, an sshd container, a CLI's
// retries) rather than use the CPU: go test's default, GOMAXPROCS, keeps
// two of them waiting at a time on a two-core machine. It returns the
// number in force.
func DefaultParallel(n int) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.parallel")
	if f == nil {
		return 0
	}
	set := false
	flag.Visit(func(v *flag.Flag) { set = set || v.Name == "test.parallel" })
	if !set {
		_ = f.Value.Set(strconv.Itoa(n))
	}
	got, _ := strconv.Atoi(f.Value.String())
	return got
}
