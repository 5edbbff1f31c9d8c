package declarative

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// compileFiles checks files and pass_variables, and prepares the files'
// contents.
func (p *preset) compileFiles() error {
	for i, v := range p.s.PassVariables {
		if !harness.ValidVariableName(v) {
			return fe(fmt.Sprintf("pass_variables[%d]", i), "%q is not a variable name", v)
		}
	}
	for i, f := range p.s.Files {
		field := fmt.Sprintf("files[%d]", i)
		if !harness.RelativePath(f.Path) || path.Clean(f.Path) != f.Path {
			return fe(field+".path", "%q must be a clean relative path inside the home", f.Path)
		}
		c := bytes.TrimSpace(f.Content)
		if len(c) == 0 || string(c) == "null" {
			return fe(field+".content", "required")
		}
		var text string
		if c[0] == '"' {
			if err := json.Unmarshal(c, &text); err != nil {
				return fe(field+".content", "%v", err)
			}
		} else {
			var b bytes.Buffer
			if err := json.Compact(&b, c); err != nil {
				return fe(field+".content", "%v", err)
			}
			text = b.String() + "\n"
		}
		if !slices.Contains([]string{"", "json", "toml"}, f.Merge) {
			return fe(field+".merge", `want "json" or "toml", not %q`, f.Merge)
		}
		p.files = append(p.files, harness.File{Path: f.Path, Content: []byte(text), Mode: 0o600, Merge: harness.Merge(f.Merge)})
	}
	return nil
}

// configuration gives the files and the pass_variables that are set.
func (p *preset) configuration(vars harness.Vars) (harness.Configuration, error) {
	var c harness.Configuration
	for _, f := range p.files {
		f.Content = bytes.Clone(f.Content)
		c.Files = append(c.Files, f)
	}
	for _, v := range p.s.PassVariables {
		if val, ok := vars.Lookup(v); ok {
			if c.Variables == nil {
				c.Variables = map[string]string{}
			}
			c.Variables[v] = val
		}
	}
	return c, nil
}

// checkEndpoint checks the endpoint facts a gateway will read.
func checkEndpoint(e *EndpointSpec) error {
	if e == nil {
		return nil
	}
	if !slices.Contains([]string{"openai-chat", "openai-responses", "anthropic", "gemini"}, e.API) {
		return fe("endpoint.api", `want "openai-chat", "openai-responses", "anthropic" or "gemini", not %q`, e.API)
	}
	if !harness.ValidVariableName(e.Secret) {
		return fe("endpoint.secret", "%q is not a variable name", e.Secret)
	}
	if e.BaseURL != "" && !harness.ValidVariableName(e.BaseURL) {
		return fe("endpoint.base_url", "%q is not a variable name", e.BaseURL)
	}
	if e.BaseURL == "" && e.BaseURLKey == "" {
		return fe("endpoint", "needs base_url or base_url_key")
	}
	if e.BaseURLKey != "" {
		file, key, ok := strings.Cut(e.BaseURLKey, "#")
		if !ok || !harness.RelativePath(file) || key == "" {
			return fe("endpoint.base_url_key", `want "<file>#<dot.path>", not %q`, e.BaseURLKey)
		}
	}
	return nil
}
