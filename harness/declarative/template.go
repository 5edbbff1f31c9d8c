package declarative

import (
	"fmt"
	"slices"
	"strings"
)

// Placeholders are the names a template may hold, as {name}. "{{" and
// "}}" stand for literal braces.
var Placeholders = []string{"prompt", "prompt_file", "model", "schema", "schema_file", "session", "parent", "child", "home", "workdir", "workdir_slug", "workdir_sql"}

// Splices are whole Args elements replaced by lists.
var Splices = []string{"{model_args}", "{session_args}", "{extra_args}"}

type part struct {
	lit string
	ph  string // placeholder name, "" for a literal
}

type tmpl []part

// parseTmpl parses one template string, allowing only the placeholders in
// allowed.
func parseTmpl(s string, allowed ...string) (tmpl, error) {
	var t tmpl
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed { in %q (write {{ for a literal brace)", s)
			}
			name := s[i+1 : i+end]
			if !slices.Contains(allowed, name) {
				if slices.Contains(Placeholders, name) {
					return nil, fmt.Errorf("placeholder {%s} cannot be used here (allowed: %s)", name, list(allowed))
				}
				return nil, fmt.Errorf("unknown placeholder {%s} (known: %s)", name, list(Placeholders))
			}
			if lit.Len() > 0 {
				t = append(t, part{lit: lit.String()})
				lit.Reset()
			}
			t = append(t, part{ph: name})
			i += end
		case c == '}':
			return nil, fmt.Errorf("unmatched } in %q (write }} for a literal brace)", s)
		case c == 0:
			return nil, fmt.Errorf("NUL byte in %q", s)
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 || len(t) == 0 {
		t = append(t, part{lit: lit.String()})
	}
	return t, nil
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "{" + n + "}"
	}
	return strings.Join(out, ", ")
}

func (t tmpl) has(name string) bool {
	for _, p := range t {
		if p.ph == name {
			return true
		}
	}
	return false
}

func (t tmpl) expand(vals map[string]string) string {
	var b strings.Builder
	for _, p := range t {
		if p.ph == "" {
			b.WriteString(p.lit)
		} else {
			b.WriteString(vals[p.ph])
		}
	}
	return b.String()
}

// literal returns the template's text when it holds no placeholder.
func (t tmpl) literal() (string, bool) {
	if len(t) == 1 && t[0].ph == "" {
		return t[0].lit, true
	}
	return "", false
}

// argList is a list of templates, with optional splice points.
type argList struct {
	items  []tmpl
	splice []string // parallel to items: the splice name, or ""
}

func parseArgs(field string, args []string, splices bool, allowed ...string) (argList, error) {
	var l argList
	seen := map[string]bool{}
	for i, a := range args {
		f := fmt.Sprintf("%s[%d]", field, i)
		if slices.Contains(Splices, a) {
			if !splices {
				return l, &FieldError{Field: f, Msg: a + " can only be used in args"}
			}
			if seen[a] {
				return l, &FieldError{Field: f, Msg: a + " appears twice"}
			}
			seen[a] = true
			l.items = append(l.items, nil)
			l.splice = append(l.splice, a)
			continue
		}
		t, err := parseTmpl(a, allowed...)
		if err != nil {
			return l, &FieldError{Field: f, Msg: err.Error()}
		}
		l.items = append(l.items, t)
		l.splice = append(l.splice, "")
	}
	return l, nil
}

func (l argList) has(name string) bool {
	for _, t := range l.items {
		if t.has(name) {
			return true
		}
	}
	return false
}

func (l argList) hasSplice(name string) bool { return slices.Contains(l.splice, name) }

// flags returns the literal option names the list uses ("--model" of
// "--model", "--model={model}").
func (l argList) flags() []string {
	var out []string
	for _, t := range l.items {
		if len(t) == 0 || t[0].ph != "" || !strings.HasPrefix(t[0].lit, "-") || t[0].lit == "-" || t[0].lit == "--" {
			continue
		}
		name, _, _ := strings.Cut(t[0].lit, "=")
		out = append(out, name)
	}
	return out
}

func (l argList) expand(vals map[string]string, splices map[string][]string) []string {
	out := make([]string, 0, len(l.items))
	for i, t := range l.items {
		if s := l.splice[i]; s != "" {
			out = append(out, splices[s]...)
			continue
		}
		out = append(out, t.expand(vals))
	}
	return out
}
