package codex

import (
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
)

// TestNativeSchema: the preset passes the turn's schema to the CLI.
func TestNativeSchema(t *testing.T) {
	if !Harness().NativeSchema {
		t.Fatal("NativeSchema is not set")
	}
	schema := []byte(`{"type":"object"}`)
	cmd, err := Request(harness.Input{Prompt: "hi", Workdir: "/w", Home: "/h", Schema: schema, SchemaFile: "/h/.outpost/schema-1.json"})
	if err != nil {
		t.Fatal(err)
	}
	flag, value := "--output-schema", "/h/.outpost/schema-1.json"
	i := slices.Index(cmd.Args, flag)
	if i < 0 || i+1 >= len(cmd.Args) || cmd.Args[i+1] != value {
		t.Errorf("args %q lack %s %s", cmd.Args, flag, value)
	}
	cmd, err = Request(harness.Input{Prompt: "hi", Workdir: "/w", Home: "/h"})
	if err != nil || strings.Contains(strings.Join(cmd.Args, " "), flag) {
		t.Errorf("without a schema: %q, %v", cmd.Args, err)
	}
}
