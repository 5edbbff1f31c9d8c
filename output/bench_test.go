package output

import (
	"strings"
	"testing"
)

// BenchmarkCheck: extracting and validating the answer at the end of a
// final message of 1 MiB of prose.
func BenchmarkCheck(b *testing.B) {
	s := MustCompile(`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]}`)
	text := strings.Repeat("Some prose with [brackets] and {braces}. ", 1<<20/41) + "\n```json\n{\"name\": \"x\", \"tags\": [\"a\", \"b\"]}\n```\n"
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if a := s.Check(text); !a.OK() {
			b.Fatal(a.Problems)
		}
	}
}
