// Package presets is the table of outpost's built-in agent presets, by
// name. Library users who want one preset import its package directly
// (harness/echo, ...); this package is for tools that pick by name.
package presets

import (
	"sort"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/antigravity"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/echo"
)

var builtins = map[string]func() *harness.Harness{
	"aider":       declarative.Aider,
	"antigravity": antigravity.Harness,
	"claude":      claude.Harness,
	"codex":       codex.Harness,
	"copilot":     copilot.Harness,
	"echo":        echo.Harness,
}

// Lookup returns a fresh copy of the named preset.
func Lookup(name string) (*harness.Harness, bool) {
	f, ok := builtins[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// Names lists the built-in presets, sorted.
func Names() []string {
	out := make([]string, 0, len(builtins))
	for n := range builtins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
