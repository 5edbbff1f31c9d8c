package isolate

import (
	"syscall"
	"testing"
)

// TestParseReport: a forwarder's report names the signal only when it
// matches bwrap's exit code; anything else leaves the code as it is.
func TestParseReport(t *testing.T) {
	for _, tc := range []struct {
		report string
		code   int
		sig    syscall.Signal
		ok     bool
	}{
		{"signal 9\n", 137, syscall.SIGKILL, true},
		{"signal 15", 143, syscall.SIGTERM, true},
		{"signal 9\n", 143, 0, false}, // another death than bwrap's
		{"signal 9\n", 9, 0, false},
		{"", 137, 0, false},
		{"signal x\n", 137, 0, false},
		{"signal 0\n", 128, 0, false},
		{"signal 200\n", 328, 0, false},
		{"exit 137\n", 137, 0, false},
	} {
		sig, ok := ParseReport(tc.report, tc.code)
		if sig != tc.sig || ok != tc.ok {
			t.Errorf("ParseReport(%q, %d) = %v, %v; want %v, %v", tc.report, tc.code, sig, ok, tc.sig, tc.ok)
		}
	}
}

// TestReporter: the report written on the child's end is read once the
// write end is closed; no report, or a code under 129, reads as none
// without blocking.
func TestReporter(t *testing.T) {
	r, err := NewReporter()
	if err != nil {
		t.Fatal(err)
	}
	r.Child().WriteString("signal 9\n")
	r.Started()
	if sig, ok := r.Signal(137); !ok || sig != syscall.SIGKILL {
		t.Errorf("Signal(137) = %v, %v", sig, ok)
	}
	r, err = NewReporter()
	if err != nil {
		t.Fatal(err)
	}
	w := r.Child() // held open, as by a process still running: Signal must not wait
	defer w.Close()
	if _, ok := r.Signal(137); ok {
		t.Error("a report read where none was written")
	}
}
