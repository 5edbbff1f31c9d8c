package output

import (
	"fmt"
	"strings"
)

// maxSchemaInText bounds the schema restated in a prompt; a larger one is
// named by its top-level shape only (the CLI with native support has it
// in full).
const maxSchemaInText = 16 << 10

// Instruction is the short text outpost adds to the prompt of a CLI that
// cannot enforce a schema itself, so the model ends its answer with the
// value.
func Instruction(s *Schema) string {
	return "End your answer with one JSON value in a fenced ```json block that matches this JSON Schema:\n" + schemaText(s)
}

// RepairMessage is the message outpost resumes the conversation with when
// an answer was refused: it names each problem (JSON pointer and message)
// and restates the required shape.
func RepairMessage(s *Schema, problems []Problem) string {
	var b strings.Builder
	b.WriteString("Your last answer does not match the required JSON Schema.\n")
	writeProblems(&b, problems)
	b.WriteString("Answer again with only the corrected JSON value in a fenced ```json block, matching this JSON Schema:\n")
	b.WriteString(schemaText(s))
	return b.String()
}

func writeProblems(b *strings.Builder, problems []Problem) {
	if len(problems) == 0 {
		return
	}
	b.WriteString("Problems:\n")
	for _, p := range problems {
		fmt.Fprintf(b, "- %s\n", p)
	}
}

func schemaText(s *Schema) string {
	raw := string(s.raw)
	if len(raw) > maxSchemaInText {
		raw = truncate(raw, maxSchemaInText)
	}
	return "```json\n" + raw + "\n```"
}
