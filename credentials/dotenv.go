package credentials

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/joho/godotenv"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// DotEnvName is the only variables file outpost reads, relative to the
// working directory: <workdir>/.outpost/.env. Parent directories, a
// top-level .env and .env.local are never read.
const DotEnvName = ".outpost/.env"

// maxDotEnvSize bounds the .env file; a larger file is a configuration
// error rather than something to load into memory.
const maxDotEnvSize = 1 << 20

// Table is the resolved lookup table plans select from, and where each name
// came from.
type Table struct {
	// Vars is the process environment with the values of .outpost/.env
	// over it.
	Vars harness.Vars
	// FromDotEnv holds the names whose value came from .outpost/.env (a
	// name set in both places is here: the file's value won).
	FromDotEnv map[string]bool
	// DotEnvPath is the .env file consulted, whether or not it existed.
	DotEnvPath string
}

// DotEnvVars returns the variables whose value came from .outpost/.env,
// with that value.
func (t Table) DotEnvVars() map[string]string {
	out := make(map[string]string, len(t.FromDotEnv))
	for name := range t.FromDotEnv {
		out[name] = t.Vars[name]
	}
	return out
}

// DotEnvError describes a .outpost/.env file that cannot be loaded. Its text
// names the file and, when known, the line, and never contains anything
// else from the file: no value, no variable name.
type DotEnvError struct {
	Path   string // the file
	Line   int    // 1-based line of the offending statement; 0 when unknown
	Reason string // what is wrong, in words that quote nothing from the file
}

func (e *DotEnvError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", e.Path, e.Line, e.Reason)
	}
	return e.Path + ": " + e.Reason
}

// Resolve builds the lookup table of a turn: environ (in os.Environ form,
// "NAME=value"; entries without "=" or with an empty name are skipped, and a
// later duplicate wins) with <workdir>/.outpost/.env over it. Only that one
// file is read; a missing file is not an error. workdir "" means the current
// directory.
//
// The table is what plans select from, not the agent's environment: of
// it, only the plain (not secret) values of .outpost/.env reach the agent
// as they are, as the base of its environment (Sources.DotEnv); see
// Environment.
//
// A .env that cannot be read or parsed gives an *outpost.Error with code
// configuration and Op "env" wrapping a *DotEnvError (see DotEnv). While
// the working directory holds ChangedMark (.outpost/ changed while a turn
// ran), Resolve refuses with a configuration error naming the changed
// entries and the mark to remove to accept them.
func Resolve(environ []string, workdir string) (Table, error) {
	vars := harness.Vars{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		vars[name] = value
	}
	if err := checkChangedMark(workdir); err != nil {
		return Table{Vars: vars, FromDotEnv: map[string]bool{}}, err
	}
	file, path, err := DotEnv(workdir)
	t := Table{Vars: vars, FromDotEnv: map[string]bool{}, DotEnvPath: path}
	if err != nil {
		return t, err
	}
	for name, value := range file {
		vars[name] = value
		t.FromDotEnv[name] = true
	}
	return t, nil
}

// DotEnv reads <workdir>/.outpost/.env with godotenv and returns its
// variables and the file's path. A missing file gives a nil map, the path
// and no error.
//
// Syntax is godotenv's: NAME=value or NAME: value, an optional "export "
// prefix, # comments; values in single quotes are literal; unquoted and
// double-quoted values expand $NAME and ${NAME} from earlier names of the
// same file only (never from the process environment), and double-quoted
// values read \n as a newline. A leading UTF-8 byte order mark is ignored.
// Outpost is stricter than godotenv on names: every name must be a valid
// environment variable name (letters, digits, underscores, not starting
// with a digit), so a stray line without "=" is an error, not an empty name.
//
// Errors are *outpost.Error with code configuration and Op "env", wrapping a
// *DotEnvError that names the file and the line when it can be told. The
// message never contains a value (nor a name) from the file: godotenv's own
// error text quotes the file's content, so it is never passed through.
func DotEnv(workdir string) (map[string]string, string, error) {
	path := filepath.Join(workdir, filepath.FromSlash(DotEnvName))
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, path, nil
	}
	if err != nil {
		return nil, path, &outpost.Error{Code: outpost.Configuration, Op: "env", Msg: "cannot read " + path, Err: err}
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxDotEnvSize+1))
	if err != nil {
		return nil, path, &outpost.Error{Code: outpost.Configuration, Op: "env", Msg: "cannot read " + path, Err: err}
	}
	if len(src) > maxDotEnvSize {
		return nil, path, dotEnvError(path, 0, fmt.Sprintf("larger than %d bytes", maxDotEnvSize))
	}
	vars, err := parseDotEnv(path, src)
	if err != nil {
		return nil, path, err
	}
	return vars, path, nil
}

// parseDotEnv parses the content of a .env file; errors are coded and
// quote nothing from src.
func parseDotEnv(path string, src []byte) (map[string]string, error) {
	src = bytes.TrimPrefix(src, []byte("\ufeff"))
	vars, err := godotenv.UnmarshalBytes(src)
	if err != nil {
		line, reason := locateDotEnvError(src, err)
		return nil, dotEnvError(path, line, reason)
	}
	var bad []string
	for name := range vars {
		if !harness.ValidVariableName(name) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		// Report the first offending line; names are not echoed (an
		// invalid "name" is as likely a stray value as a typo).
		lines := make([]int, 0, len(bad))
		for _, name := range bad {
			lines = append(lines, nameLine(src, name))
		}
		sort.Ints(lines)
		line := lines[0]
		for _, l := range lines {
			if l > 0 {
				line = l
				break
			}
		}
		return nil, dotEnvError(path, line, "expected NAME=value with a valid variable name (letters, digits and underscores, not starting with a digit)")
	}
	return vars, nil
}

func dotEnvError(path string, line int, reason string) error {
	return &outpost.Error{
		Code: outpost.Configuration,
		Op:   "env",
		Msg:  "invalid " + DotEnvName,
		Err:  &DotEnvError{Path: path, Line: line, Reason: reason},
	}
}

// godotenv error texts this file recognizes to tell the line; the texts
// themselves are never shown. An unrecognized text gives line 0.
const (
	gdtUnterminated = "unterminated quoted value "
	gdtUnexpected   = "unexpected character "
	gdtNear         = " in variable name near "
)

// locateDotEnvError finds the line of a godotenv parse error and describes
// it without quoting the file.
func locateDotEnvError(src []byte, err error) (line int, reason string) {
	norm := bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n")) // as godotenv reads it
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, gdtUnterminated) && len(msg) > len(gdtUnterminated):
		// godotenv scanned from the opening quote to the end of the file
		// without finding an unescaped closing quote, so the opening quote
		// is the last unescaped occurrence of that quote character.
		q := msg[len(gdtUnterminated)]
		for i := len(norm) - 1; i >= 0; i-- {
			if norm[i] == q && (i == 0 || norm[i-1] != '\\') {
				return lineOf(norm, i), "unterminated quoted value"
			}
		}
		return 0, "unterminated quoted value"
	case strings.HasPrefix(msg, gdtUnexpected):
		// The text after " near " is the rest of the file from the
		// statement's start, %q-quoted.
		reason = "expected NAME=value (a line without \"=\" or a name with a character other than letters, digits and underscores)"
		if _, near, ok := strings.Cut(msg, gdtNear); ok {
			if rest, err := strconv.Unquote(near); err == nil && bytes.HasSuffix(norm, []byte(rest)) {
				return lineOf(norm, len(norm)-len(rest)), reason
			}
		}
		return 0, reason
	default:
		return 0, "cannot be parsed"
	}
}

// lineOf returns the 1-based line of byte offset off.
func lineOf(src []byte, off int) int {
	if off > len(src) {
		off = len(src)
	}
	return bytes.Count(src[:off], []byte("\n")) + 1
}

// nameLine returns the line where godotenv read name as a variable name, or
// 0. For the empty name it is the first line starting with "=" or ":", else
// the last statement (a final line without "=").
func nameLine(src []byte, name string) int {
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	last := 0
	for i, l := range lines {
		s := strings.TrimLeft(l, " \t\v\f\r")
		if s == "" || s[0] == '#' {
			continue
		}
		last = i + 1
		if rest, ok := strings.CutPrefix(s, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			s = strings.TrimLeft(rest, " \t")
		}
		if rest, ok := strings.CutPrefix(s, name); ok {
			rest = strings.TrimLeft(rest, " \t")
			if rest != "" && (rest[0] == '=' || rest[0] == ':') {
				return i + 1
			}
		}
	}
	if name == "" {
		return last
	}
	return 0
}
