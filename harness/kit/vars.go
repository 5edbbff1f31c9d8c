package kit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// PassVariables returns the variables of names that vars sets, for a
// preset's Configuration to pass to its CLI (nil when none is set). Those
// also named in urls must be http:// or https:// URLs; the error names the
// variable and the preset, never the value.
func PassVariables(preset string, vars harness.Vars, names []string, urls ...string) (map[string]string, error) {
	var out map[string]string
	for _, name := range names {
		v, ok := vars.Lookup(name)
		if !ok {
			continue
		}
		if slices.Contains(urls, name) && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return nil, fmt.Errorf("%s: %s must be an http:// or https:// URL", preset, name)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = v
	}
	return out, nil
}
