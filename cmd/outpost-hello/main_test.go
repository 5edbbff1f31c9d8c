package main

import (
	"strings"
	"testing"
)

// TestUsage: a missing or extra prompt, or an unknown flag, is a usage
// error (exit 2) that says how to call the command, and runs no turn.
// integration's TestReadmeFirstCommand runs real turns with the binary.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"a", "b"}, {"--nope", "x"}, {"--resume"}} {
		var out, errOut strings.Builder
		if code := run(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out.Len() != 0 || !strings.Contains(errOut.String(), "usage: outpost-hello [--resume ID] PROMPT") {
			t.Errorf("%q: stdout %q, stderr %q", args, out.String(), errOut.String())
		}
	}
}
