package declarative

import (
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
)

// TestProtocolACP: a preset file of protocol "acp" compiles into a
// preset driven over its live protocol, resumable with storage and its
// resume step applied; the fields the protocol replaces are refused,
// naming the field.
func TestProtocolACP(t *testing.T) {
	const base = `{"kind":"cli","name":"myacp","protocol":"acp","program":"agent","args":["--acp"],"model_args":["-m","{model}"],
		"resume_prepare":[["agent","fix","{workdir}"]],
		"storage":{"roots":[".agent"],"files":["{session}.json"]}`
	h, err := Parse("myacp.json", []byte(base+`}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !h.LiveOnly || h.LiveInput == nil || !h.Resumes() || h.Forks() || !h.RequiresFinishedEvent {
		t.Errorf("preset %+v", h)
	}
	cmd, err := h.Request(harness.Input{Prompt: "x", Model: "m1", Conversation: "s1", Workdir: "/w"})
	if err != nil || strings.Join(cmd.Args, " ") != "--acp -m m1" || !cmd.KeepStdin || len(cmd.Prepare) != 1 || cmd.Prepare[0].Args[1] != "/w" {
		t.Errorf("command %+v, %v", cmd, err)
	}
	for field, extra := range map[string]string{
		"output":      `,"output":{"format":"jsonl","events":[]}`,
		"prompt":      `,"prompt":"stdin"`,
		"resume_args": `,"resume_args":["-r","{session}"]`,
		"fork":        `,"fork":{"args":["x"]}`,
	} {
		if _, err := Parse("myacp.json", []byte(base+extra+`}`), nil); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if _, err := Parse("x.json", []byte(`{"kind":"cli","name":"x","protocol":"mcp","program":"a"}`), nil); err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("unknown protocol: %v", err)
	}
	if _, err := Parse("x.json", []byte(`{"kind":"cli","name":"x","protocol":"acp","program":"a","args":["{prompt}"]}`), nil); err == nil || !strings.Contains(err.Error(), "args[0]") {
		t.Errorf("a placeholder in args: %v", err)
	}
}
