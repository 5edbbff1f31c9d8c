package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStructuredOutput: the StructuredOutput tool answer (Claude Code
// --json-schema), the tools and schema a request offered, and the
// invalid-first-then-valid sequence of the repair path, whose second
// request carries the repair message.
func TestStructuredOutput(t *testing.T) {
	srv := New(t, Options{})
	srv.Enqueue(Text("not json at all"), StructuredOutput(map[string]string{"name": "x"}))
	schema := map[string]any{"type": "object", "required": []string{"name"}}
	body := func(msgs ...map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{
			"model": "claude-test-1", "max_tokens": 1000, "stream": true, "messages": msgs,
			"tools": []any{
				map[string]any{"name": "Bash", "input_schema": map[string]any{"type": "object"}},
				map[string]any{"name": StructuredOutputTool, "input_schema": schema},
			},
		})
		return b
	}
	_, m := streamMessage(t, srv.URL(), body(userText("give me a name")))
	if m.Content[0].Text != "not json at all" {
		t.Fatalf("first answer %+v", m)
	}
	repair := "Your last answer does not match the required JSON Schema.\n- (root): the answer holds no JSON value"
	_, m = streamMessage(t, srv.URL(), body(userText("give me a name"), map[string]any{"role": "assistant", "content": "not json at all"}, userText(repair)))
	if len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != StructuredOutputTool || string(m.Content[0].Input) != `{"name":"x"}` {
		t.Fatalf("second answer %+v", m)
	}
	reqs := srv.MessageRequests()
	if !reqs[0].HasTool(StructuredOutputTool) || reqs[0].HasTool("Write") {
		t.Errorf("tools %v", reqs[0].Tools)
	}
	if got := string(reqs[0].ToolSchema(StructuredOutputTool)); got != `{"required":["name"],"type":"object"}` {
		t.Errorf("tool schema %s", got)
	}
	if !strings.Contains(reqs[1].LastUserText, "(root): the answer holds no JSON value") || reqs[1].Scenario != "structured" {
		t.Errorf("repair request: scenario %s, last user %q", reqs[1].Scenario, reqs[1].LastUserText)
	}
	// By name, for the fakeanthropic command: -scenario structured -text '<json>'.
	sc, _ := ScenarioByName("structured", &Options{Text: `{"a":1}`})
	if sc.Tool == nil || sc.Tool.Name != StructuredOutputTool || string(sc.Tool.Input) != `{"a":1}` {
		t.Errorf("structured by name: %+v", sc)
	}
}
