package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Init is one package's initialisation, as the runtime's init trace
// (GODEBUG=inittrace=1) reports it: the heap it allocated and how many
// allocations. (The trace's clock time is left out: tests never assert on
// time.)
type Init struct {
	Package string
	Bytes   int64
	Allocs  int64
}

// initLine is one line of the init trace:
//
//	init PKG @T ms, C ms clock, B bytes, A allocs
var initLine = lazyre.New(`(?m)^init (\S+) @[0-9.]+ ms, [0-9.]+ ms clock, (\d+) bytes, (\d+) allocs$`)

// InitTrace runs bin with args under GODEBUG=inittrace=1 and returns the
// packages it initialised, in order. It fails the test when the program
// fails or prints no trace.
func InitTrace(tb testing.TB, bin string, args ...string) []Init {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
	trace, err := ParseInitTrace(string(out))
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
	return trace
}

// ParseInitTrace parses the init trace lines of out.
func ParseInitTrace(out string) ([]Init, error) {
	var trace []Init
	for _, m := range initLine.FindAllStringSubmatch(out, -1) {
		b, _ := strconv.ParseInt(m[2], 10, 64)
		a, _ := strconv.ParseInt(m[3], 10, 64)
		trace = append(trace, Init{Package: m[1], Bytes: b, Allocs: a})
	}
	if len(trace) == 0 {
		return nil, fmt.Errorf("no init trace in the output")
	}
	return trace, nil
}
