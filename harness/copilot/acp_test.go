package copilot_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/copilot"
)

// acpOpen is what copilot --acp 1.0.102 answers initialize and
// session/new with (trimmed: its capabilities and the session's modes).
var acpOpen = []string{
	`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"sessionCapabilities":{"close":{},"list":{}}},"agentInfo":{"name":"Copilot","title":"Copilot","version":"1.0.102"}}}`,
	`{"jsonrpc":"2.0","id":2,"result":{"sessionId":"81535e3c-e2f7-460b-8227-8b239ea816b9"}}`,
}

// acpUpdate is a session/update of the session above.
func acpUpdate(update string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"81535e3c-e2f7-460b-8227-8b239ea816b9","update":` + update + `}}`
}

func acpChunk(text string) string {
	return acpUpdate(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)
}

const acpEndTurn = `{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}`

// acpTurn runs the preset's ACP client over the agent's lines.
func acpTurn(t *testing.T, lines ...string) ([]harness.Event, harness.Live) {
	t.Helper()
	l, err := copilot.ACP().LiveInput(harness.Input{Prompt: "say hi", Workdir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := l.Begin(&out); err != nil {
		t.Fatal(err)
	}
	var evs []harness.Event
	for _, line := range append(append([]string(nil), acpOpen...), lines...) {
		evs = append(evs, l.Decode([]byte(line), &out)...)
	}
	return evs, l
}

func ofType(evs []harness.Event, typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// TestACPErrorChunks: Copilot CLI 1.0.102 in ACP mode reports a model
// call that failed after its retries as a message chunk "Error: …" and
// ends the prompt end_turn (the lines are the real CLI's against the fake
// Chat Completions API, docs/presets/acp-adapters.md). The turn fails
// (turn_failed) with the text the JSONL preset's classifiers read: a 429
// is quota with its reset time, a 500 an outage, a 401 a refused
// credential; the retry notice is a notice, and none of it is the answer.
func TestACPErrorChunks(t *testing.T) {
	h := copilot.ACP()
	cases := []struct {
		name                     string
		lines                    []string
		quota, outage, misconfig bool
		retries                  int
	}{
		{"429", []string{
			acpUpdate(`{"sessionUpdate":"usage_update","used":8775,"size":64000}`),
			acpChunk(`Error: Failed to get response from the AI model; retried 5 times (total retry wait time: 5.69 seconds) Last error: 429 Rate limit reached for requests. Please try again in 1s.`),
			acpEndTurn}, true, false, false, 0},
		{"500", []string{
			acpChunk(`Info: Request failed due to a transient API error. Retrying...`),
			acpChunk(`Error: Failed to get response from the AI model; retried 5 times (total retry wait time: 17.07 seconds) Last error: 500 The server had an error while processing your request. Sorry about that!`),
			acpEndTurn}, false, true, false, 1},
		{"401", []string{
			acpChunk(`Info: Request failed due to a transient API error. Retrying...`),
			acpChunk(`Error: Authentication failed with provider at http://127.0.0.1:37637/v1 (HTTP 401).\n  Check your COPILOT_PROVIDER_API_KEY, COPILOT_PROVIDER_API_KEY_COMMAND, or COPILOT_PROVIDER_BEARER_TOKEN.`),
			acpEndTurn}, false, false, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, l := acpTurn(t, tc.lines...)
			fails := ofType(evs, harness.EventFailure)
			if len(fails) != 1 || fails[0].Kind != harness.KindTurnFailed || len(ofType(evs, harness.EventFinished)) != 0 || !l.Done() {
				t.Fatalf("events %+v", evs)
			}
			text := fails[0].Text
			if got := [3]bool{h.Quota(text), h.Unavailable(text), h.Misconfigured(text)}; got != [3]bool{tc.quota, tc.outage, tc.misconfig} {
				t.Errorf("(quota, outage, misconfigured) of %q = %v", text, got)
			}
			if tc.quota && fails[0].Details["resets_at"] == nil {
				t.Errorf("no resets_at in %v", fails[0].Details)
			}
			if m := ofType(evs, harness.EventMessage); len(m) != 0 {
				t.Errorf("the CLI's own text became the answer: %+v", m)
			}
			var retries int
			for _, n := range ofType(evs, harness.EventNotice) {
				if n.Kind == "retry" {
					retries++
				}
			}
			if retries != tc.retries {
				t.Errorf("%d retry notices, want %d: %+v", retries, tc.retries, evs)
			}
		})
	}
}

// TestACPModelText: the model's own words stay the answer, an "Error: "
// of its own included (streamed as deltas, or one that is not the CLI's
// text).
func TestACPModelText(t *testing.T) {
	evs, _ := acpTurn(t, acpChunk(`Error: `), acpChunk(`Failed to get response from the AI model; retried 5 times`), acpChunk(`Error: the build failed`),
		`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","usage":{"inputTokens":100,"outputTokens":10,"totalTokens":110,"thoughtTokens":3,"cachedReadTokens":20,"cachedWriteTokens":0}}}`)
	fin := ofType(evs, harness.EventFinished)
	if len(ofType(evs, harness.EventFailure)) != 0 || len(fin) != 1 || !strings.HasPrefix(fin[0].Text, "Error: Failed to get") || !strings.HasSuffix(fin[0].Text, "the build failed") {
		t.Fatalf("events %+v", evs)
	}
}
