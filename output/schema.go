package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// MaxSchema bounds a schema document (1 MiB).
const MaxSchema = 1 << 20

// MaxProblems bounds the problems reported for one answer; the rest are
// counted in a last problem.
const MaxProblems = 20

// ErrSchema is the cause of every schema refusal (not JSON, not a valid
// schema, too large). The turn engine reports it with code configuration
// before any sandbox is allocated.
var ErrSchema = errors.New("output: invalid schema")

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	raw []byte // the document, compacted
	sch *jsonschema.Schema
}

// schemaURL is the schema's own location; nothing is ever loaded from it.
const schemaURL = "urn:outpost:schema"

// Compile compiles a JSON Schema document. Without "$schema" the document
// is read as draft 2020-12. References resolve only inside the document
// and to the drafts' meta-schemas: nothing is loaded from files or the
// network. The "format" keyword is asserted (an "email" that is not one
// fails). Errors wrap ErrSchema.
func Compile(doc []byte) (*Schema, error) {
	if len(doc) > MaxSchema {
		return nil, fmt.Errorf("%w: %d bytes, over the %d byte limit", ErrSchema, len(doc), MaxSchema)
	}
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, fmt.Errorf("%w: empty document", ErrSchema)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrSchema, err)
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("%w: a schema is a JSON object or a boolean, not %s", ErrSchema, kindOf(v))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrSchema, oneLine(err.Error(), 2000))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	return &Schema{raw: buf.Bytes(), sch: sch}, nil
}

// MustCompile is Compile for schemas known to be valid; it panics.
func MustCompile(doc string) *Schema {
	s, err := Compile([]byte(doc))
	if err != nil {
		panic(err)
	}
	return s
}

// JSON returns the schema document, compacted (what a CLI with native
// schema support receives).
func (s *Schema) JSON() []byte { return bytes.Clone(s.raw) }

// MarshalJSON returns the document, so a Schema serializes as itself.
func (s *Schema) MarshalJSON() ([]byte, error) { return s.JSON(), nil }

// UnmarshalJSON compiles the document.
func (s *Schema) UnmarshalJSON(b []byte) error {
	c, err := Compile(b)
	if err != nil {
		return err
	}
	*s = *c
	return nil
}

// noLoader refuses every reference outside the document: a schema never
// reads a file or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("references outside the schema are not loaded (%s)", url)
}

// Problem is one reason an answer was refused: where (a JSON pointer into
// the answer, "" for the whole answer) and what.
type Problem struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	ptr := p.Pointer
	if ptr == "" {
		ptr = "(root)"
	}
	return ptr + ": " + p.Message
}

var printer = sync.OnceValue(func() *message.Printer { return message.NewPrinter(language.English) })

// Validate checks a decoded value (as decoded by Decode: numbers as
// json.Number) and returns its problems, nil when it matches.
func (s *Schema) Validate(v any) []Problem {
	err := s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{Message: oneLine(err.Error(), 500)}}
	}
	var out []Problem
	seen := map[Problem]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			p := Problem{Pointer: pointer(e.InstanceLocation), Message: oneLine(e.ErrorKind.LocalizedString(printer()), 500)}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	return capProblems(out)
}

func capProblems(ps []Problem) []Problem {
	if len(ps) <= MaxProblems {
		return ps
	}
	more := len(ps) - (MaxProblems - 1)
	ps = append(ps[:MaxProblems-1:MaxProblems-1], Problem{Message: fmt.Sprintf("and %d more problems", more)})
	return ps
}

// pointer renders instance location tokens as a JSON pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// oneLine folds s onto one line and bounds it to max bytes (at a rune
// boundary).
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return truncate(s, max)
}

// truncate bounds s to max bytes at a rune boundary, marking the cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
