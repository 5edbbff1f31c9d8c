package outpost_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"testing"

	"github.com/outposthq/outpost"
)

func TestErrorChain(t *testing.T) {
	cause := fs.ErrNotExist
	err := outpost.Errorf(outpost.Conversation, "restore", "conversation %s: %w", "c1", cause)
	wrapped := fmt.Errorf("turn: %w", err)
	if got := outpost.CodeOf(wrapped); got != outpost.Conversation {
		t.Errorf("CodeOf = %q", got)
	}
	if !errors.Is(wrapped, fs.ErrNotExist) {
		t.Error("cause lost")
	}
	if !errors.Is(wrapped, outpost.ErrConversation) || errors.Is(wrapped, outpost.ErrQuota) {
		t.Error("code sentinels do not match")
	}
	if want := "conversation: restore: conversation c1: file does not exist"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if err.Message() != "restore: conversation c1: file does not exist" {
		t.Errorf("Message() = %q", err.Message())
	}
}

func TestCodeOfAndExitCode(t *testing.T) {
	if outpost.CodeOf(nil) != "" || outpost.ExitCode(nil) != 0 {
		t.Error("nil is success")
	}
	if outpost.CodeOf(context.Canceled) != outpost.Process || outpost.ExitCode(context.Canceled) != 1 {
		t.Error("an unclassified error is process / exit 1")
	}
	seen := map[int]outpost.Code{}
	for _, c := range outpost.Codes {
		n := outpost.ExitCode(&outpost.Error{Code: c})
		if n <= 2 {
			t.Errorf("%s exits %d, which is reserved", c, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%s and %s share exit %d", c, prev, n)
		}
		seen[n] = c
	}
}

func TestWrapKeepsCode(t *testing.T) {
	inner := outpost.New(outpost.Quota, "", "limit")
	err := outpost.Wrap(outpost.Process, "run", fmt.Errorf("x: %w", inner))
	if outpost.CodeOf(err) != outpost.Quota || inner.Op != "run" {
		t.Errorf("Wrap changed the code or did not fill Op: %v", err)
	}
	if outpost.Wrap(outpost.Process, "run", nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
	u := (&outpost.Error{Code: outpost.Process}).Detail("unavailable", true)
	if !outpost.UnavailableFault(fmt.Errorf("w: %w", u)) || outpost.UnavailableFault(inner) {
		t.Error("UnavailableFault")
	}
}

// A code is printed once: an Op that only repeats it is not printed (the
// CLI printed "outpost: output: output: the answer does not match the
// schema"), nor is a cause's "code: " prefix.
func TestErrorOpRepeatingCode(t *testing.T) {
	for _, tc := range []struct {
		err       *outpost.Error
		want, msg string
	}{
		{outpost.New(outpost.Output, "output", "the answer does not match"), "output: the answer does not match", "the answer does not match"},
		{outpost.New(outpost.Bootstrap, "bootstrap", "download failed"), "bootstrap: download failed", "download failed"},
		{outpost.New(outpost.Output, "repair", "no repair"), "output: repair: no repair", "repair: no repair"},
		// A cause of the same code, a package's sentinel, says the code
		// once: "conversation: locate: X: conversation: not found".
		{outpost.Errorf(outpost.Conversation, "locate", "%s: %w", "c01x", errors.New("conversation: not found")), "conversation: locate: c01x: not found", "locate: c01x: not found"},
		{&outpost.Error{Code: outpost.Sandbox, Op: "run", Err: fmt.Errorf("sandbox: lease: %w", errors.New("sandbox: closed"))}, "sandbox: run: lease: closed", "run: lease: closed"},
		// Another code's name, or the word without its colon, stays.
		{outpost.Errorf(outpost.Configuration, "sandbox", "docker: %w", errors.New("bootstrap: no pin")), "configuration: sandbox: docker: bootstrap: no pin", "sandbox: docker: bootstrap: no pin"},
		{outpost.New(outpost.Conversation, "locate", "conversation c01x has 2 turns"), "conversation: locate: conversation c01x has 2 turns", "locate: conversation c01x has 2 turns"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if got := tc.err.Message(); got != tc.msg {
			t.Errorf("Message() = %q, want %q", got, tc.msg)
		}
	}
}

// TestBudgetCode: the budget code has its own exit status (11), a
// sentinel, and a place in Codes.
func TestBudgetCode(t *testing.T) {
	err := fmt.Errorf("turn: %w", (&outpost.Error{Code: outpost.Budget, Op: "run"}).Detail("budget", "turn"))
	if got := outpost.ExitCode(err); got != 11 {
		t.Errorf("ExitCode = %d, want 11", got)
	}
	if !errors.Is(err, outpost.ErrBudget) || outpost.CodeOf(err) != outpost.Budget {
		t.Errorf("errors.Is(ErrBudget) = %v, CodeOf = %q", errors.Is(err, outpost.ErrBudget), outpost.CodeOf(err))
	}
	if !slices.Contains(outpost.Codes, outpost.Budget) {
		t.Error("Codes lacks budget")
	}
}
