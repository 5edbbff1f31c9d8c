// Package presets is the registry of agent presets, by name: the one
// place a preset is registered. Library users who want one preset import
// its package directly (harness/echo, ...); this package is for tools
// that pick by name (`outpost run --agent`, `outpost agents`, `outpost
// bootstrap`).
//
// An entry is a preset's constructor, and everything else derives from
// the preset it returns: its name (Harness.Name) and its bootstrap name
// (Harness.Bootstrap), which names its pin in bootstrap/pins.json — the
// CLI's kind (npm, archive, or outpost's own binary), npm package, program
// and pinned version. The test environment (internal/testenv) and
// scripts/install-clis.sh read the same pins; a test in cmd/outpost/cli
// proves that they all agree.
//
// A program that embeds outpost's command adds its own presets with
// Register.
package presets

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/antigravity"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/harness/gemini"
)

var (
	mu       sync.RWMutex
	registry = map[string]func() *harness.Harness{}
)

// builtin are the built-in presets by name, one line each. The names are
// written out so that a process looking up one preset (`outpost run`'s
// echo agent) or listing them builds none: building a preset parses and
// validates it, and building all nine cost every `outpost run` about a
// millisecond. TestBuiltins proves each constructor returns a valid
// preset of the name it is listed under.
var builtin = []struct {
	name string
	new  func() *harness.Harness
}{
	{"aider", declarative.Aider},
	{"antigravity", antigravity.Harness},
	{"claude", claude.Harness},
	{"claude-acp", claude.ACP},
	{"codex", codex.Harness},
	{"codex-acp", codex.ACP},
	{"copilot", copilot.Harness},
	{"copilot-acp", copilot.ACP},
	{"echo", echo.Harness},
	{"gemini", gemini.Harness},
	{"gemini-acp", gemini.ACP},
	{"opencode", declarative.OpenCode},
	{"opencode-acp", declarative.OpenCodeACP},
	{"qwen", declarative.Qwen},
	{"qwen-acp", declarative.QwenACP},
}

// builtins enters the built-in presets into the registry the first time
// it is used, not at init, and without building them.
var builtins = sync.OnceFunc(func() {
	mu.Lock()
	defer mu.Unlock()
	for _, b := range builtin {
		registry[b.name] = b.new
	}
})

// Builtin lists the built-in presets' names and constructors, for tests
// that check every one (TestBuiltins).
func Builtin() map[string]func() *harness.Harness {
	out := make(map[string]func() *harness.Harness, len(builtin))
	for _, b := range builtin {
		out[b.name] = b.new
	}
	return out
}

// Register adds a preset under the name of the preset f returns. It fails
// when the preset is not valid (harness.Harness.Validate) or its name is
// taken. f is called once here and once per Lookup: it must return a fresh
// preset each time.
func Register(f func() *harness.Harness) error {
	if f == nil {
		return fmt.Errorf("presets: nil constructor")
	}
	builtins()
	return register(f)
}

func register(f func() *harness.Harness) error {
	h := f()
	if err := h.Validate(); err != nil {
		return fmt.Errorf("presets: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := registry[h.Name]; ok {
		return fmt.Errorf("presets: %q is already registered", h.Name)
	}
	registry[h.Name] = f
	return nil
}

// Lookup returns a fresh copy of the named preset.
func Lookup(name string) (*harness.Harness, bool) {
	builtins()
	mu.RLock()
	f, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, false
	}
	return f(), true
}

// Names lists the registered presets, sorted.
func Names() []string {
	builtins()
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}
