package harness_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
)

func valid() *harness.Harness {
	return &harness.Harness{
		Name:    "demo",
		Request: func(harness.Input) (harness.Command, error) { return harness.Command{Path: "demo"}, nil },
		Events:  func([]byte) []harness.Event { return nil },
		Storage: &harness.Storage{Roots: []string{".demo"}, Match: func(rel, native string) bool { return true }},
		Capture: harness.True, Resumable: harness.True, Forkable: harness.True,
	}
}

func TestValidate(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid preset refused: %v", err)
	}
	cases := []struct {
		name string
		mod  func(h *harness.Harness)
		want string
	}{
		{"bad name", func(h *harness.Harness) { h.Name = "Bad Name" }, "name"},
		{"no request", func(h *harness.Harness) { h.Request = nil }, "Request is required"},
		{"no events", func(h *harness.Harness) { h.Events = nil }, "is required"},
		{"usage pair", func(h *harness.Harness) { h.UsageResult = func([]byte) *harness.Usage { return nil } }, "go together"},
		{"session usage without command", func(h *harness.Harness) { h.Usage = harness.UsageSession }, "needs UsageCommand"},
		{"unknown usage mode", func(h *harness.Harness) { h.Usage = "guess" }, "unknown usage mode"},
		{"storage without match", func(h *harness.Harness) { h.Storage.Match = nil }, "Roots and Match"},
		{"escaping root", func(h *harness.Harness) { h.Storage.Roots = []string{"../etc"} }, "inside the home"},
		{"absolute root", func(h *harness.Harness) { h.Storage.Roots = []string{"/etc"} }, "inside the home"},
		{"capture without storage", func(h *harness.Harness) { h.Storage, h.Resumable, h.Forkable = nil, harness.Unset, harness.Unset }, "Capture needs Storage"},
		{"resumable without storage", func(h *harness.Harness) { h.Storage, h.Capture, h.Forkable = nil, harness.False, harness.Unset }, "Resumable needs Storage"},
		{"tristate out of range", func(h *harness.Harness) { h.Capture = 7 }, "not Unset, True or False"},
		{"negative retry bound", func(h *harness.Harness) { h.RetryBound = -1 }, "negative RetryBound"},
		{"quota details alone", func(h *harness.Harness) { h.QuotaDetails = func(string) map[string]any { return nil } }, "QuotaDetails needs Quota"},
		{"bad variable", func(h *harness.Harness) { h.Variables = map[string]string{"A B": "x"} }, "variable name"},
		{"negative watchdog", func(h *harness.Harness) { h.Inactivity = -1 }, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := valid()
			c.mod(h)
			err := h.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, c.want)
			}
		})
	}
	var nilH *harness.Harness
	if nilH.Validate() == nil {
		t.Error("nil preset validated")
	}
}

func TestUsageArithmetic(t *testing.T) {
	a := harness.Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 2, Complete: true}
	b := harness.Usage{InputTokens: 3, OutputTokens: 1, Complete: false}
	if s := a.Add(b); s.InputTokens != 13 || s.Complete {
		t.Errorf("Add = %+v", s)
	}
	if d := b.Sub(a); d.InputTokens != 0 || d.OutputTokens != 0 {
		t.Errorf("Sub below zero = %+v", d)
	}
}

func TestSafeJSON(t *testing.T) {
	for _, in := range []string{`{"a":1}`, "{\"\x91\":\"\"}", "not json", "\xff", `[1,2`} {
		out := harness.SafeJSON([]byte(in))
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Errorf("SafeJSON(%q) = %q", in, out)
		}
	}
	if harness.SafeJSON(nil) != nil {
		t.Error("nil became non-nil")
	}
}

func TestRelativePath(t *testing.T) {
	for p, ok := range map[string]bool{"a/b": true, ".claude": true, "": false, "/a": false, "a/../b": false, "a//b": false, "..": false, `a\b`: false} {
		if harness.RelativePath(p) != ok {
			t.Errorf("RelativePath(%q) = %v", p, !ok)
		}
	}
}

// TestAbsentFlags: an absent Capture, Resumable or Forkable keeps the
// reference's meaning (rules 1-3): capture and resume as soon as storage
// exists, fork unless refused; a preset that does not resume cannot fork,
// yet is a valid preset.
func TestAbsentFlags(t *testing.T) {
	for _, c := range []struct {
		name                     string
		storage                  bool
		capture, resume, fork    harness.Tristate
		captures, resumes, forks bool
	}{
		{"all absent with storage", true, harness.Unset, harness.Unset, harness.Unset, true, true, true},
		{"all absent without storage", false, harness.Unset, harness.Unset, harness.Unset, false, false, false},
		{"capture false", true, harness.False, harness.Unset, harness.Unset, false, true, true},
		{"forkable false", true, harness.Unset, harness.Unset, harness.False, true, true, false},
		{"resumable false, forkable true", true, harness.Unset, harness.False, harness.True, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := valid()
			if !c.storage {
				h.Storage = nil
			}
			h.Capture, h.Resumable, h.Forkable = c.capture, c.resume, c.fork
			if err := h.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if h.Captures() != c.captures || h.Resumes() != c.resumes || h.Forks() != c.forks {
				t.Errorf("Captures %v Resumes %v Forks %v, want %v %v %v", h.Captures(), h.Resumes(), h.Forks(), c.captures, c.resumes, c.forks)
			}
		})
	}
}
