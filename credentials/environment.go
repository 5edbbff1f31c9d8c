package credentials

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// Sources are the layers of one command's environment, lowest precedence
// first in the order Environment applies them.
type Sources struct {
	// Fixed are the provider's variables a turn may not set (HOME, XDG_*,
	// TMPDIR). Any other source naming one is a configuration error.
	Fixed map[string]string
	// Defaults are the provider's overridable variables (PATH, LANG, TZ,
	// TERM): the lowest layer.
	Defaults map[string]string
	// DotEnv are the values of .outpost/.env, the base the agent's own
	// variables go over. A secret (IsSecret: its name or its value looks
	// like one) is left out: it reaches the agent only when the credential
	// plan selects it (Plan).
	DotEnv map[string]string
	// Configuration are the variables of the harness's configuration plan.
	Configuration map[string]string
	// Plan are the variables of the harness's credential plan.
	Plan map[string]string
	// Harness are the preset's Variables.
	Harness map[string]string
	// Command is the Env of the command the preset built.
	Command map[string]string
	// Explicit are the caller's explicit values (--env): the highest layer
	// below Fixed.
	Explicit map[string]string
}

// layer names one Sources field in messages.
type layer struct {
	name string
	vars map[string]string
}

func (s Sources) layers() []layer {
	return []layer{
		{"the provider defaults", s.Defaults},
		{DotEnvName, plainVars(s.DotEnv)},
		{"the configuration plan", s.Configuration},
		{"the credential plan", s.Plan},
		{"the harness Variables", s.Harness},
		{"the command", s.Command},
		{"explicit values (--env)", s.Explicit},
	}
}

// plainVars are the variables of vars that are not secrets (IsSecret).
func plainVars(vars map[string]string) map[string]string {
	out := map[string]string{}
	for name, v := range vars {
		if !IsSecret(name, v) {
			out[name] = v
		}
	}
	return out
}

// Environment builds the complete environment of one command from its
// sources. Precedence, lowest first; a later layer overrides an earlier
// one:
//
//	Defaults < DotEnv < Configuration < Plan < Harness < Command < Explicit < Fixed
//
// so the caller's explicit values beat everything the preset chose, the
// preset's per-command and per-agent values beat what the plans selected,
// credentials beat configuration, the plain settings of .outpost/.env are
// the base under all of those (its secrets only come through the plan),
// and the provider's overridable defaults (PATH, LANG, TZ, TERM) yield to
// everything. Fixed values are always what the process gets.
//
// Errors are *outpost.Error with code configuration and Op "variables":
// when any source but Fixed and Defaults (a .outpost/.env too) sets a
// Fixed name (the message
// lists each clashing name with the source that set it, never a value;
// Details["names"] holds the sorted names), when a name is not a valid
// variable name, or when a value contains a NUL byte (the name is given,
// not the value). The result is a new map; the inputs are not modified.
func Environment(s Sources) (map[string]string, error) {
	var clashes, invalid, nul []string
	clashNames := map[string]bool{}
	layers := s.layers()
	for i, l := range layers {
		for _, name := range slices.Sorted(maps.Keys(l.vars)) {
			switch {
			case !harness.ValidVariableName(name):
				invalid = append(invalid, fmt.Sprintf("%q (%s)", name, l.name))
			case strings.IndexByte(l.vars[name], 0) >= 0:
				nul = append(nul, fmt.Sprintf("%s (%s)", name, l.name))
			}
			if _, fixed := s.Fixed[name]; fixed && i > 0 {
				clashes = append(clashes, fmt.Sprintf("%s (set by %s)", name, l.name))
				clashNames[name] = true
			}
		}
	}
	switch {
	case len(clashes) > 0:
		return nil, outpost.New(outpost.Configuration, "variables",
			"variables defined by the sandbox provider cannot be overridden: "+strings.Join(clashes, ", ")).
			Detail("names", slices.Sorted(maps.Keys(clashNames)))
	case len(invalid) > 0:
		return nil, outpost.New(outpost.Configuration, "variables",
			"invalid variable names: "+strings.Join(invalid, ", "))
	case len(nul) > 0:
		return nil, outpost.New(outpost.Configuration, "variables",
			"variable values contain a NUL byte: "+strings.Join(nul, ", "))
	}
	env := map[string]string{}
	for _, l := range layers {
		maps.Copy(env, l.vars)
	}
	maps.Copy(env, s.Fixed)
	return env, nil
}
