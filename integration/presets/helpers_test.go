package presets

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
)

// The helpers below are the integration package's, for the preset tests
// that run here in a package of their own.

var (
	eachProvider = testenv.EachProvider
	onLocal      = testenv.OnLocal
	copyFile     = testenv.CopyFile
)

type lockedBuffer = testenv.LockedBuffer

// runOutpost runs the built outpost binary with a private OUTPOST_HOME.
func runOutpost(t *testing.T, home, dir string, args ...string) (int, string, string) {
	t.Helper()
	return testenv.RunOutpost(t, home, dir, nil, args...)
}

// outcome is what one turn produced.
type outcome struct {
	res    *engine.Result
	err    error
	events []harness.Event
	stderr string
}

func (o *outcome) ofType(typ harness.EventType) []harness.Event {
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func times(u harness.Usage, n int64) harness.Usage {
	return harness.Usage{InputTokens: u.InputTokens * n, OutputTokens: u.OutputTokens * n, CacheReadTokens: u.CacheReadTokens * n, CacheWriteTokens: u.CacheWriteTokens * n, Complete: u.Complete}
}

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}`

func equalTypes(a, b []harness.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eventSummary(evs []harness.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(string(ev.Type))
		if ev.Kind != "" {
			b.WriteString("/" + ev.Kind)
		}
		if ev.Text != "" {
			t := ev.Text
			if len(t) > 80 {
				t = t[:80] + "…"
			}
			b.WriteString(" " + t)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// runOutpostEnv is runOutpost with env added.
func runOutpostEnv(t *testing.T, home, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return testenv.RunOutpost(t, home, dir, env, args...)
}

func (o *outcome) kind(kind string) []harness.Event {
	var out []harness.Event
	for _, ev := range o.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// checkShellTool checks a tool turn's first call and result: the shell
// tool name ran the fake's default command, whose output came back.
func checkShellTool(t *testing.T, o *outcome, name string) {
	t.Helper()
	tools := toolEvents(o)
	call, result := tools[0].Tool, tools[1].Tool
	var input map[string]any
	json.Unmarshal(call.Input, &input)
	if call.Name != name || input["command"] != openai.DefaultCommand || result.ID != call.ID || call.ID == "" ||
		!strings.Contains(result.Output, "hi") || result.Error {
		t.Errorf("tool call %+v, result %+v", call, result)
	}
}
