package output

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompileRefuses(t *testing.T) {
	broken, err := os.ReadFile(filepath.Join("testdata", "broken-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	big := `{"description":"` + strings.Repeat("x", MaxSchema) + `"}`
	tests := []struct{ name, doc, want string }{
		{"broken file", string(broken), "not JSON"},
		{"not JSON", "type: object", "not JSON"},
		{"empty", "  ", "empty"},
		{"a string", `"object"`, "a string"},
		{"bad type", `{"type":"objekt"}`, "metaschema"},
		{"bad pattern", `{"type":"string","pattern":"("}`, "pattern"},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, "not loaded"},
		{"file ref", `{"$ref":"file:///etc/passwd"}`, "not loaded"},
		{"over 1 MiB", big, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]byte(tt.doc))
			if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile: %v, want ErrSchema mentioning %q", err, tt.want)
			}
			if len(err.Error()) > 3000 {
				t.Errorf("error of %d bytes is not bounded", len(err.Error()))
			}
		})
	}
}

// TestKeywords: every keyword presets and orchestrators rely on is
// enforced (draft 2020-12).
func TestKeywords(t *testing.T) {
	tests := []struct {
		name, schema string
		good, bad    string
		pointer      string
	}{
		{"type", `{"type":"object"}`, `{}`, `[]`, ""},
		{"type list", `{"type":["string","null"]}`, `null`, `1`, ""},
		{"properties", `{"properties":{"a":{"type":"integer"}}}`, `{"a":1}`, `{"a":1.5}`, "/a"},
		{"required", `{"required":["a"]}`, `{"a":0}`, `{}`, ""},
		{"additionalProperties", `{"properties":{"a":{}},"additionalProperties":false}`, `{"a":1}`, `{"a":1,"b":2}`, ""},
		{"patternProperties", `{"patternProperties":{"^x-":{"type":"string"}}}`, `{"x-a":"s"}`, `{"x-a":1}`, "/x-a"},
		{"propertyNames", `{"propertyNames":{"maxLength":2}}`, `{"ab":1}`, `{"abc":1}`, ""},
		{"min/maxProperties", `{"minProperties":1,"maxProperties":1}`, `{"a":1}`, `{}`, ""},
		{"dependentRequired", `{"dependentRequired":{"a":["b"]}}`, `{"a":1,"b":2}`, `{"a":1}`, ""},
		{"items", `{"type":"array","items":{"type":"string"}}`, `["a"]`, `["a",1]`, "/1"},
		{"prefixItems", `{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`, `["a",1]`, `["a",1,2]`, "/2"},
		{"min/maxItems", `{"minItems":1,"maxItems":2}`, `[1]`, `[]`, ""},
		{"uniqueItems", `{"uniqueItems":true}`, `[1,2]`, `[1,1]`, ""},
		{"contains", `{"contains":{"const":3},"minContains":1}`, `[1,3]`, `[1,2]`, "/0"},
		{"enum", `{"enum":["a","b"]}`, `"a"`, `"c"`, ""},
		{"const", `{"const":{"k":1}}`, `{"k":1}`, `{"k":2}`, ""},
		{"string length", `{"minLength":2,"maxLength":3}`, `"ab"`, `"a"`, ""},
		{"pattern", `{"pattern":"^[a-z]+$"}`, `"abc"`, `"ABC"`, ""},
		{"format email", `{"format":"email"}`, `"a@b.co"`, `"not an email"`, ""},
		{"format date-time", `{"format":"date-time"}`, `"2026-12-01T10:00:00Z"`, `"yesterday"`, ""},
		{"format uuid", `{"format":"uuid"}`, `"0b5b5c5e-3f7e-4b8e-9a3c-1d2e3f4a5b6c"`, `"nope"`, ""},
		{"numbers", `{"minimum":1,"exclusiveMaximum":10,"multipleOf":2}`, `4`, `10`, ""},
		{"big integers stay exact", `{"type":"integer","maximum":18446744073709551615}`, `18446744073709551615`, `18446744073709551616`, ""},
		{"allOf", `{"allOf":[{"type":"object"},{"required":["a"]}]}`, `{"a":1}`, `{}`, ""},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `1`, `true`, ""},
		{"oneOf", `{"oneOf":[{"required":["a"]},{"required":["b"]}]}`, `{"a":1}`, `{"a":1,"b":1}`, ""},
		{"not", `{"not":{"type":"null"}}`, `1`, `null`, ""},
		{"if/then/else", `{"if":{"properties":{"k":{"const":"n"}}},"then":{"required":["n"]},"else":{"required":["s"]}}`, `{"k":"n","n":1}`, `{"k":"n"}`, ""},
		{"$defs and $ref", `{"$defs":{"id":{"type":"string","minLength":1}},"properties":{"id":{"$ref":"#/$defs/id"}}}`, `{"id":"x"}`, `{"id":""}`, "/id"},
		{"recursive $ref", `{"$id":"urn:tree","type":"object","properties":{"kids":{"type":"array","items":{"$ref":"urn:tree"}}},"required":["kids"]}`, `{"kids":[{"kids":[]}]}`, `{"kids":[{}]}`, "/kids/0"},
		{"unevaluatedProperties", `{"properties":{"a":{}},"unevaluatedProperties":false}`, `{"a":1}`, `{"z":1}`, "/z"},
		{"boolean schema false", `false`, ``, `1`, ""},
		{"pointer escaping", `{"properties":{"a/b~c":{"type":"string"}}}`, `{"a/b~c":"s"}`, `{"a/b~c":1}`, "/a~1b~0c"},
		{"draft-07 by $schema", `{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}]}`, `["a"]`, `[1]`, "/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Compile([]byte(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			if tt.good != "" {
				if a := s.Check(tt.good); !a.OK() {
					t.Errorf("good %s refused: %v", tt.good, a.Problems)
				}
			}
			a := s.Check(tt.bad)
			if a.OK() || len(a.Problems) == 0 {
				t.Fatalf("bad %s accepted", tt.bad)
			}
			found := false
			for _, p := range a.Problems {
				if p.Pointer == tt.pointer {
					found = true
				}
				if p.Message == "" {
					t.Errorf("problem without a message: %+v", p)
				}
			}
			if !found {
				t.Errorf("problems %v: none at pointer %q", a.Problems, tt.pointer)
			}
		})
	}
}

func TestRepairMessage(t *testing.T) {
	s := MustCompile(`{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name"]}`)
	a := s.Check("```json\n{\"n\": \"x\"}\n```")
	if a.OK() {
		t.Fatal("accepted")
	}
	msg := RepairMessage(s, a.Problems)
	for _, want := range []string{"/n: ", "(root): missing property 'name'", `"required":["name"]`, "```json"} {
		if !strings.Contains(msg, want) {
			t.Errorf("repair message lacks %q:\n%s", want, msg)
		}
	}
	if !strings.Contains(Instruction(s), `"required":["name"]`) {
		t.Errorf("instruction lacks the schema: %s", Instruction(s))
	}
}

func TestProblemsBounded(t *testing.T) {
	s := MustCompile(`{"type":"array","items":{"type":"string"}}`)
	a := s.Check("[" + strings.Repeat("1,", 500) + "1]")
	if len(a.Problems) != MaxProblems || !strings.Contains(a.Problems[MaxProblems-1].Message, "more problems") {
		t.Fatalf("got %d problems, last %v", len(a.Problems), a.Problems[len(a.Problems)-1])
	}
}

func TestCheckValue(t *testing.T) {
	s := MustCompile(`{"type":"object","properties":{"a":{"type":"number"}}}`)
	a := s.Check("The result:\n```json\n{\n  \"a\": 1.50\n}\n```")
	if !a.OK() {
		t.Fatal(a.Problems)
	}
	if d := cmp.Diff(`{"a":1.50}`, string(a.Value)); d != "" {
		t.Error(d)
	}
	if a := s.Check("no answer"); a.OK() || a.Problems[0].Message != "the answer holds no JSON value" {
		t.Errorf("missing answer: %+v", a)
	}
	if a := s.Check("```json\n{\"a\": \n```"); a.OK() || !strings.Contains(a.Problems[0].Message, "not valid JSON") {
		t.Errorf("broken answer: %+v", a)
	}
}
