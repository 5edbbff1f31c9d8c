package credentials

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// mergeJSON deep-merges the JSON object plan into the JSON object old:
// plan's keys win, objects present on both sides are merged recursively,
// anything else (arrays, strings, numbers, null) is replaced. old nil means
// the file is absent (or empty): plan is validated and returned as is. The
// result is indented with two spaces, keys sorted, HTML characters not
// escaped, numbers kept as written.
func mergeJSON(p string, old, plan []byte) ([]byte, error) {
	over, line, err := decodeObject(plan)
	if err != nil {
		return nil, contentError(p, "generated", "is not a JSON object", line)
	}
	if len(bytes.TrimSpace(old)) == 0 {
		return bytes.Clone(plan), nil
	}
	base, line, err := decodeObject(old)
	if err != nil {
		return nil, contentError(p, "existing", "in the sandbox home is not a JSON object", line)
	}
	harness.MergeObjects(base, over)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(base); err != nil {
		return nil, fmt.Errorf("encoding merged %s: %w", p, err)
	}
	return buf.Bytes(), nil
}

// errNotObject marks JSON that parses but is not an object.
var errNotObject = errors.New("not an object")

// decodeObject decodes one JSON object with nothing after it. On a syntax
// error it returns the 1-based line (0 when unknown). The error it returns
// must not be shown: encoding/json quotes characters of the input.
func decodeObject(b []byte) (map[string]any, int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, lineOf(b, int(se.Offset)), err
		}
		return nil, 0, err
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return nil, lineOf(b, int(dec.InputOffset())), errors.New("data after the JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, 1, errNotObject
	}
	return m, 0, nil
}

// contentError is the configuration error for a file whose content cannot
// be merged. It names the file and the line and quotes nothing of the
// content (which may hold secrets), so the parser's error is not wrapped.
func contentError(p, which, what string, line int) error {
	msg := fmt.Sprintf("%s %s %s", which, p, what)
	if line > 0 {
		msg += fmt.Sprintf(" (line %d)", line)
	}
	if which == "existing" {
		msg += "; fix or remove it"
	}
	e := (&outpost.Error{Code: outpost.Configuration, Msg: msg}).Detail("path", p)
	if line > 0 {
		e.Detail("line", line)
	}
	return e
}

// mergeTOML appends to the TOML document old the top-level keys of plan it
// lacks. The unit is the top-level name: plan's `name = ...` and
// `name.sub = ...` statements and its [name] and [name.sub] tables (and
// [[name]] arrays of tables) are added only when old defines name in none
// of these ways, and are otherwise left out entirely, so a table the user
// already has is never touched. Key-value statements go before old's first
// table header (where TOML puts top-level keys), tables at the end. When
// nothing is missing old is returned unchanged, byte for byte.
//
// The parser is minimal, not a TOML implementation: it splits the text into
// statements (recognizing comments, bare, quoted and dotted keys, basic and
// literal strings including multi-line ones, and arrays and inline tables
// spanning lines) and reads only the statements' top-level names. It does
// not validate values. A line it cannot read as a key-value statement, a
// table header, a comment or a blank is a configuration error naming the
// file and line.
func mergeTOML(p string, old, plan []byte) ([]byte, error) {
	ps, line, err := scanTOML(string(plan))
	if err != nil {
		return nil, contentError(p, "generated", "is not TOML that can be merged", line)
	}
	if old == nil {
		return bytes.Clone(plan), nil
	}
	od, line, err := scanTOML(string(old))
	if err != nil {
		return nil, contentError(p, "existing", "in the sandbox home is not TOML that can be merged", line)
	}
	have := map[string]bool{}
	for _, st := range od.stmts {
		if st.kind != tomlComment && (st.kind == tomlHeader || st.top) {
			have[st.name] = true
		}
	}
	var keys, tables strings.Builder
	var comments string // comments and blanks waiting for the next statement
	inTable := false    // the plan's current section is being copied
	for _, st := range ps.stmts {
		switch {
		case st.kind == tomlComment:
			comments += st.text
			continue
		case st.kind == tomlHeader:
			inTable = !have[st.name]
			if inTable {
				tables.WriteString(comments)
				tables.WriteString(st.text)
			}
		case st.top:
			if !have[st.name] {
				keys.WriteString(comments)
				keys.WriteString(st.text)
			}
		case inTable:
			tables.WriteString(comments)
			tables.WriteString(st.text)
		}
		comments = ""
	}
	if keys.Len() == 0 && tables.Len() == 0 {
		return old, nil
	}
	src := string(old)
	head, rest := src, ""
	if od.firstHeader >= 0 {
		head, rest = src[:od.firstHeader], src[od.firstHeader:]
	}
	var out strings.Builder
	out.WriteString(head)
	if keys.Len() > 0 {
		if head != "" && !strings.HasSuffix(head, "\n") {
			out.WriteString("\n")
		}
		out.WriteString(ensureNewline(keys.String()))
		if rest != "" {
			out.WriteString("\n")
		}
	}
	out.WriteString(rest)
	if tables.Len() > 0 {
		if s := out.String(); s != "" {
			if !strings.HasSuffix(s, "\n") {
				out.WriteString("\n")
			}
			out.WriteString("\n")
		}
		out.WriteString(ensureNewline(strings.TrimLeft(tables.String(), " \t\r\n")))
	}
	return []byte(out.String()), nil
}

func ensureNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

type tomlKind int

const (
	tomlComment tomlKind = iota // comment or blank line
	tomlKeyVal
	tomlHeader
)

// tomlStmt is one statement: its kind, its text (whole lines, newlines
// included) and, for key-values and headers, the first segment of its key.
type tomlStmt struct {
	kind tomlKind
	name string
	top  bool // a key-value before any table header
	text string
}

type tomlDoc struct {
	stmts       []tomlStmt
	firstHeader int // byte offset of the first table header, -1 if none
}

// scanTOML splits src into statements. On failure it returns the 1-based
// line of the statement it could not read.
func scanTOML(src string) (tomlDoc, int, error) {
	doc := tomlDoc{firstHeader: -1}
	var lines []string
	for rest := src; rest != ""; {
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			lines = append(lines, rest)
			break
		}
		lines = append(lines, rest[:i+1])
		rest = rest[i+1:]
	}
	off := 0
	for n := 0; n < len(lines); {
		start, line := off, n+1
		l := lines[n]
		n++
		off += len(l)
		t := strings.TrimSpace(l)
		switch {
		case t == "" || t[0] == '#':
			doc.stmts = append(doc.stmts, tomlStmt{kind: tomlComment, text: l})
			continue
		case t[0] == '[':
			name, ok := headerName(t)
			if !ok {
				return doc, line, errors.New("bad table header")
			}
			if doc.firstHeader < 0 {
				doc.firstHeader = start
			}
			doc.stmts = append(doc.stmts, tomlStmt{kind: tomlHeader, name: name, text: l})
			continue
		}
		name, value, ok := keyName(t)
		if !ok {
			return doc, line, errors.New("not a key-value statement")
		}
		var st valueState
		if !st.scan(value) {
			return doc, line, errors.New("bad value")
		}
		text := l
		for st.open() {
			if n >= len(lines) {
				return doc, line, errors.New("unterminated value")
			}
			if !st.scan(lines[n]) {
				return doc, line, errors.New("bad value")
			}
			text += lines[n]
			off += len(lines[n])
			n++
		}
		doc.stmts = append(doc.stmts, tomlStmt{kind: tomlKeyVal, name: name, top: doc.firstHeader < 0, text: text})
	}
	return doc, 0, nil
}

// headerName returns the first key segment of a [table] or [[array]]
// header line (trimmed).
func headerName(t string) (string, bool) {
	inner := strings.TrimPrefix(t, "[")
	double := strings.HasPrefix(inner, "[")
	if double {
		inner = inner[1:]
	}
	name, rest, ok := keySegments(inner)
	if !ok {
		return "", false
	}
	rest = strings.TrimLeft(rest, " \t")
	closing := "]"
	if double {
		closing = "]]"
	}
	if !strings.HasPrefix(rest, closing) {
		return "", false
	}
	rest = strings.TrimSpace(rest[len(closing):])
	return name, rest == "" || rest[0] == '#'
}

// keyName reads `key = value` and returns the key's first segment and the
// text after "=".
func keyName(t string) (name, value string, ok bool) {
	name, rest, ok := keySegments(t)
	if !ok {
		return "", "", false
	}
	rest = strings.TrimLeft(rest, " \t")
	if !strings.HasPrefix(rest, "=") {
		return "", "", false
	}
	return name, rest[1:], true
}

// keySegments reads a dotted key (bare, "basic" or 'literal' segments) at
// the start of s and returns its first segment, unquoted, and the rest.
func keySegments(s string) (first, rest string, ok bool) {
	for i := 0; ; i++ {
		s = strings.TrimLeft(s, " \t")
		var seg string
		switch {
		case s == "":
			return "", "", false
		case s[0] == '"':
			j := 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return "", "", false
			}
			seg, s = unquoteBasic(s[:j+1]), s[j+1:]
		case s[0] == '\'':
			j := strings.IndexByte(s[1:], '\'')
			if j < 0 {
				return "", "", false
			}
			seg, s = s[1:j+1], s[j+2:]
		default:
			j := 0
			for j < len(s) && isBareKeyChar(s[j]) {
				j++
			}
			if j == 0 {
				return "", "", false
			}
			seg, s = s[:j], s[j:]
		}
		if i == 0 {
			first = seg
		}
		t := strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(t, ".") {
			return first, s, true
		}
		s = t[1:]
	}
}

func isBareKeyChar(c byte) bool {
	return c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// unquoteBasic unquotes a TOML basic string key; its escapes are JSON's
// plus \e and \UXXXXXXXX, which are rare in keys and kept literally.
func unquoteBasic(q string) string {
	var s string
	if err := json.Unmarshal([]byte(q), &s); err != nil {
		return q[1 : len(q)-1]
	}
	return s
}

// valueState tracks a value across lines: an open multi-line string and
// the depth of arrays and inline tables.
type valueState struct {
	ml    string // `"""` or `'''` while inside a multi-line string
	depth int
}

func (v *valueState) open() bool { return v.ml != "" || v.depth > 0 }

// scan consumes one line of a value; false means it cannot be read.
func (v *valueState) scan(l string) bool {
	for i := 0; i < len(l); {
		if v.ml != "" {
			j := closingDelim(l[i:], v.ml)
			if j < 0 {
				return true
			}
			i += j + 3
			// A delimiter may be followed by one or two more quotes that
			// belong to the string.
			for k := 0; k < 2 && i < len(l) && l[i] == v.ml[0]; k++ {
				i++
			}
			v.ml = ""
			continue
		}
		switch c := l[i]; c {
		case '#':
			return true
		case '"', '\'':
			delim := strings.Repeat(string(c), 3)
			if strings.HasPrefix(l[i:], delim) {
				v.ml = delim
				i += 3
				continue
			}
			j := i + 1
			for ; j < len(l) && l[j] != c && l[j] != '\n'; j++ {
				if c == '"' && l[j] == '\\' {
					j++
				}
			}
			if j >= len(l) || l[j] != c {
				return false
			}
			i = j + 1
		case '[', '{':
			v.depth++
			i++
		case ']', '}':
			v.depth--
			if v.depth < 0 {
				return false
			}
			i++
		default:
			i++
		}
	}
	return true
}

// closingDelim finds the end delimiter of a multi-line string in s; in a
// basic string (`"""`) a quote escaped by a backslash does not count.
func closingDelim(s, delim string) int {
	for i := 0; i+3 <= len(s); i++ {
		if s[i] == '\\' && delim == `"""` {
			i++
			continue
		}
		if s[i:i+3] == delim {
			return i
		}
	}
	return -1
}
