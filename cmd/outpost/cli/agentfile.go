package cli

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/presets"
)

// lookupAgent resolves --agent: a built-in preset by name, a preset file
// by path (./mytool.json), or NAME.json in the user's agents directory
// ($XDG_CONFIG_HOME/outpost/agents). A built-in name is never shadowed.
func lookupAgent(agent string) (*harness.Harness, error) {
	opts := &declarative.Options{Bootstrap: bootstrap.Known}
	if declarative.IsPath(agent) {
		return declarative.Load(agent, opts)
	}
	if h, ok := presets.Lookup(agent); ok {
		return h, nil
	}
	dir := declarative.Dir(nil)
	h, ok, err := declarative.Find(dir, agent, opts)
	if err != nil {
		return nil, err
	}
	if ok {
		return h, nil
	}
	known := presets.Names()
	if files := declarative.List(dir); len(files) > 0 {
		known = append(known, files...)
	}
	return nil, outpost.Errorf(outpost.Configuration, "agent", "unknown agent %q (known: %s; or a preset file, docs/presets/custom.md)", agent, strings.Join(known, ", "))
}

// openTrace opens the --trace file for appending (never truncated, so an
// orchestrator can tail it), private to the user.
func openTrace(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "trace", err)
	}
	return f, nil
}

// traceLogger writes the engine's trace records (RunOptions.Logger: steps,
// events, classification decisions, all redacted by the engine) as JSON
// lines with a timestamp each.
func traceLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
