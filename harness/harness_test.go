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
		Capture: true, Resumable: true, Forkable: true,
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
		{"capture without storage", func(h *harness.Harness) { h.Storage, h.Resumable, h.Forkable = nil, false, false }, "Capture needs Storage"},
		{"resumable without storage", func(h *harness.Harness) { h.Storage, h.Capture = nil, false }, "need Storage"},
		{"fork without resume", func(h *harness.Harness) { h.Resumable = false }, "Forkable needs Resumable"},
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
