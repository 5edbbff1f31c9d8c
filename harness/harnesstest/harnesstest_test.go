package harnesstest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/harness/harnesstest"
)

// echoLines is native output of the echo agent, with the oddities its
// #badlines directive prints.
var echoLines = []string{
	`{"type":"init","session":"4f0c2b9e-1d7a-4c55-9a4e-0b6f2f6f8a11","model":"echo-1","turn":1}`,
	`{"type":"retry","attempt":1,"text":"rate limited (429), retrying in 10ms (attempt 1 of 3)"}`,
	`{"type":"tool_call","id":"tool-1","name":"shell","input":{"command":"echo hi"}}`,
	`{"type":"tool_result","id":"tool-1","output":"hi\n"}`,
	`{"type":"text","text":`,
	`not json at all`,
	`{"type":"from-the-future","x":1}`,
	`{"type":"delta","id":"m1","text":"step 1 "}`,
	`{"type":"text","id":"m1","text":"echo: hello (turn 1)"}`,
	`{"type":"done","text":"echo: hello (turn 1)","usage":{"input":1,"output":4,"cache_read":0}}`,
}

// TestEcho runs the suite on the echo preset with a golden case written
// here.
func TestEcho(t *testing.T) {
	h := echo.Harness()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello"+harnesstest.StdoutSuffix), []byte(strings.Join(echoLines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dec := harnesstest.Decoder(h)
	var evs []harness.Event
	for _, l := range echoLines {
		evs = append(evs, dec([]byte(l))...)
	}
	want := harnesstest.GoldenText("hello", h.Name, evs)
	if !strings.Contains(want, "\nnotice/retry\ntool_call tool=shell\ntool_result\nmessage delta\nmessage\nfinished\n") {
		t.Errorf("golden text:\n%s", want)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello"+harnesstest.EventsSuffix), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	harnesstest.RunConformanceTests(t, h, dir)
}

func TestCheckEvent(t *testing.T) {
	bad := []harness.Event{
		{Type: "mystery"},
		{Type: harness.EventNotice, Kind: "decode_error", Text: "boom"},
		{Type: harness.EventToolCall, Tool: &harness.Tool{Input: json.RawMessage(`{"unterminated`)}},
	}
	for _, ev := range bad {
		if harnesstest.CheckEvent(ev) == nil {
			t.Errorf("CheckEvent(%+v) = nil", ev)
		}
	}
	if err := harnesstest.CheckEvent(harness.Event{Type: harness.EventMessage, Text: "ok"}); err != nil {
		t.Error(err)
	}
}

func TestInputs(t *testing.T) {
	line := []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}`)
	plain, swaps := harnesstest.Inputs(line, 50)
	if len(plain) < 32 || len(swaps) == 0 {
		t.Fatalf("%d plain, %d swaps", len(plain), len(swaps))
	}
	var truncated, invalid bool
	for _, in := range plain {
		truncated = truncated || (len(in) < len(line) && strings.HasPrefix(string(line), string(in)))
		invalid = invalid || strings.ContainsRune(string(in), 0xfffd) || strings.Contains(string(in), "\xff")
	}
	if !truncated || !invalid {
		t.Errorf("plain inputs lack truncations (%v) or invalid UTF-8 (%v)", truncated, invalid)
	}
	for _, in := range swaps {
		if !json.Valid(in) {
			t.Errorf("a type swap is not JSON: %s", in)
		}
	}
	// The walk restores every value: the original line decodes unchanged
	// after Inputs.
	if !json.Valid(line) {
		t.Error("Inputs changed its argument")
	}
}
