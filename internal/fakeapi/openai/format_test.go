package openai

import (
	"testing"
)

// TestOutputFormat: the structured-output format a request asked for is
// recorded (Codex --output-schema sends Responses text.format; Chat
// Completions clients send response_format).
func TestOutputFormat(t *testing.T) {
	s := Start(t, Config{})
	schema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}
	body := responsesBody("answer")
	body["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "codex_output_schema", "strict": true, "schema": schema}}
	if _, _, err := doResponses(t, s, body); err != nil {
		t.Fatal(err)
	}
	plain := responsesBody("answer")
	plain["text"] = map[string]any{"format": map[string]any{"type": "text"}}
	if _, _, err := doResponses(t, s, plain); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if got := string(reqs[0].OutputSchema()); got != `{"properties":{"n":{"type":"integer"}},"type":"object"}` {
		t.Errorf("schema %s (format %v)", got, reqs[0].OutputFormat)
	}
	if reqs[0].OutputFormat["name"] != "codex_output_schema" {
		t.Errorf("format %v", reqs[0].OutputFormat)
	}
	if reqs[1].OutputFormat != nil || reqs[1].OutputSchema() != nil {
		t.Errorf("plain text request has a format: %v", reqs[1].OutputFormat)
	}
	chat := map[string]any{"model": "m", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}}
	resp, err := post(t, t.Context(), s.URL()+"/chat/completions", "sk-fake", chat)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := string(s.Requests()[2].OutputSchema()); got != `{"properties":{"n":{"type":"integer"}},"type":"object"}` {
		t.Errorf("chat schema %s", got)
	}
}
