package declarative

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
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

// checkEndpoint checks the endpoint facts a gateway will read, and that
// the base URL variable reaches the agent: the gateway points the CLI at
// itself through that variable, so one the preset never passes would run
// the turn "keyless" with the CLI calling its default upstream with the
// gateway's token (issue 43).
func checkEndpoint(s *Spec) error {
	e := s.Endpoint
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
	if e.BaseURL != "" && !passed(s, e.BaseURL) {
		return fe("endpoint.base_url", "%q is not passed to the agent, so a credential gateway's address would never reach the CLI: "+
			"add it to pass_variables (or credentials.variables)", e.BaseURL)
	}
	return nil
}

// passed reports whether the preset passes variable v to the agent.
func passed(s *Spec, v string) bool {
	if slices.Contains(s.PassVariables, v) {
		return true
	}
	return s.Credentials != nil && slices.Contains(s.Credentials.Variables, v)
}

// endpoints is a checked endpoint spec as the credential gateway reads
// it: the secret sent the way its API expects (x-api-key for anthropic,
// x-goog-api-key for gemini, Authorization: Bearer for the OpenAI APIs),
// to the base URL variable. The spec names no default upstream, so the
// endpoint applies only when that variable is set; a base URL kept only
// in a file's key (base_url_key) cannot be pointed at the gateway.
func endpoints(e *EndpointSpec) []harness.Endpoint {
	if e == nil || e.BaseURL == "" {
		return nil
	}
	cred := "bearer"
	switch e.API {
	case "anthropic":
		cred = "x-api-key"
	case "gemini":
		cred = "x-goog-api-key"
	}
	return []harness.Endpoint{{
		API:     e.API,
		Secrets: []harness.EndpointSecret{{Variable: e.Secret, Credential: cred}},
		BaseURL: e.BaseURL,
	}}
}

// resumeFile is a compiled resume_files entry: its path, and its content
// with every string a template.
type resumeFile struct {
	path    tmpl
	content any // decoded JSON: string leaves are tmpl
	text    bool
	merge   harness.Merge
}

var (
	resumePlaceholders  = []string{"session", "workdir", "workdir_slug", "home"}
	preparePlaceholders = []string{"session", "workdir", "workdir_sql", "home"}
)

// compileResumePrepare checks resume_prepare: each command a literal
// program and argument templates.
func (p *preset) compileResumePrepare() error {
	for i, c := range p.s.ResumePrepare {
		field := fmt.Sprintf("resume_prepare[%d]", i)
		l, err := parseArgs(field, c, false, preparePlaceholders...)
		if err != nil {
			return err
		}
		if len(l.items) == 0 {
			return fe(field, "required: a program and its arguments")
		}
		if prog, ok := l.items[0].literal(); !ok || prog == "" {
			return fe(field+"[0]", "the program must be a literal name")
		}
		p.resumePrepare = append(p.resumePrepare, l)
	}
	return nil
}

// prepareFor are the commands run before a resumed or forked turn.
func (p *preset) prepareFor(session string, in harness.Input) []harness.Command {
	vals := map[string]string{"session": session, "workdir": in.Workdir, "workdir_sql": sqlString(in.Workdir), "home": in.Home}
	var out []harness.Command
	for _, l := range p.resumePrepare {
		argv := l.expand(vals, nil)
		out = append(out, harness.Command{Path: argv[0], Args: argv[1:]})
	}
	return out
}

// sqlString is s as an SQL string literal: single quotes, doubled inside.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// compileResumeFiles checks resume_files: clean relative paths once
// expanded, contents whose strings are templates.
func (p *preset) compileResumeFiles() error {
	for i, f := range p.s.ResumeFiles {
		field := fmt.Sprintf("resume_files[%d]", i)
		pt, err := parseTmpl(f.Path, resumePlaceholders...)
		if err != nil {
			return fe(field+".path", "%v", err)
		}
		probe := pt.expand(map[string]string{"session": "s", "workdir_slug": "-w", "workdir": "w", "home": "h"})
		if !harness.RelativePath(probe) || path.Clean(probe) != probe || pt.has("workdir") || pt.has("home") {
			return fe(field+".path", "%q must be a clean relative path inside the home ({session} and {workdir_slug} only)", f.Path)
		}
		var v any
		if err := json.Unmarshal(f.Content, &v); err != nil || v == nil {
			return fe(field+".content", "required: a JSON string or value")
		}
		rf := resumeFile{path: pt, merge: harness.Merge(f.Merge)}
		if !slices.Contains([]string{"", "json", "toml"}, f.Merge) {
			return fe(field+".merge", `want "json" or "toml", not %q`, f.Merge)
		}
		_, rf.text = v.(string)
		if rf.content, err = templates(v); err != nil {
			return fe(field+".content", "%v", err)
		}
		p.resumeFiles = append(p.resumeFiles, rf)
	}
	return nil
}

// templates replaces every string of a decoded JSON value by its template.
func templates(v any) (any, error) {
	switch v := v.(type) {
	case string:
		return parseTmpl(v, resumePlaceholders...)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			t, err := templates(x)
			if err != nil {
				return nil, err
			}
			out[k] = t
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			t, err := templates(x)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
		return out, nil
	}
	return v, nil
}

// expandJSON expands the templates of a compiled content.
func expandJSON(v any, vals map[string]string) any {
	switch v := v.(type) {
	case tmpl:
		return v.expand(vals)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = expandJSON(x, vals)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = expandJSON(x, vals)
		}
		return out
	}
	return v
}

// resumeFiles are the files of a resumed or forked conversation's turn.
func (p *preset) resumeFilesFor(session string, in harness.Input) ([]harness.File, error) {
	vals := map[string]string{"session": session, "workdir": in.Workdir, "workdir_slug": claude.Slug(in.Workdir), "home": in.Home}
	var out []harness.File
	for _, f := range p.resumeFiles {
		c := expandJSON(f.content, vals)
		var b []byte
		if s, ok := c.(string); ok && f.text {
			b = []byte(s)
		} else {
			var err error
			if b, err = json.Marshal(c); err != nil {
				return nil, fmt.Errorf("%s: resume file: %w", p.s.Name, err)
			}
			b = append(b, '\n')
		}
		out = append(out, harness.File{Path: f.path.expand(vals), Content: b, Mode: 0o600, Merge: f.merge})
	}
	return out, nil
}
