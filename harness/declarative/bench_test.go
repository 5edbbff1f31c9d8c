package declarative_test

import (
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/echo"
)

// The cost of describing a CLI by field paths instead of Go: the echo
// agent's lines decoded by its Go preset (the anchor) and by
// testdata/echo.json.
var benchLines = [][]byte{
	[]byte(`{"type":"init","session":"0f8fad5b-d9cb-469f-a165-70867728950e","model":"echo-1","turn":1}`),
	[]byte(`{"type":"delta","id":"m1","text":"step 1 "}`),
	[]byte(`{"type":"text","id":"m1","text":"echo: hello (turn 1)"}`),
	[]byte(`{"type":"done","text":"echo: hello (turn 1)","usage":{"input":1,"output":4,"cache_read":0}}`),
}

func benchDecode(b *testing.B, dec func([]byte) []harness.Event) {
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range benchLines {
			dec(l)
		}
	}
}

func BenchmarkDecodeEchoGo(b *testing.B) { benchDecode(b, echo.Events) }

func BenchmarkDecodeEchoFile(b *testing.B) {
	h, err := declarative.Load("testdata/echo.json", nil)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, h.Events)
}

func BenchmarkDecodeAiderText(b *testing.B) {
	h := declarative.Aider()
	lines := [][]byte{[]byte("Aider v0.86.1"), []byte("Main model: gpt-4o with diff edit format"), []byte("aider: hello (turn 1)"), []byte("Done."),
		[]byte("Tokens: 2.1k sent, 6 received. Cost: $0.0074 message, $0.0074 session.")}
	b.ReportAllocs()
	for b.Loop() {
		dec := h.NewDecoder()
		for _, l := range lines {
			dec(l)
		}
		dec(nil)
	}
}
