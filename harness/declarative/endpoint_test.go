package declarative_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
)

// TestEndpoints: a file's endpoint becomes the preset's harness.Endpoint
// for the credential gateway (the secret sent the way its API expects,
// no default upstream); a preset without one, or whose base URL is only
// a file's key, has none.
func TestEndpoints(t *testing.T) {
	openai := []harness.Endpoint{{API: "openai-chat", Secrets: []harness.EndpointSecret{{Variable: "OPENAI_API_KEY", Credential: "bearer"}}, BaseURL: "OPENAI_BASE_URL"}}
	for name, tt := range map[string]struct {
		h    *harness.Harness
		want []harness.Endpoint
	}{
		"qwen":     {declarative.Qwen(), openai},
		"opencode": {declarative.OpenCode(), openai},
		"aider":    {declarative.Aider(), nil},
	} {
		if d := cmp.Diff(tt.want, tt.h.Endpoints); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	for api, cred := range map[string]string{"anthropic": "x-api-key", "gemini": "x-goog-api-key", "openai-responses": "bearer"} {
		h, err := declarative.Parse("x.json", []byte(`{"kind":"cli","name":"x","program":"x","args":["{extra_args}"],"prompt":"stdin","output":{"format":"text"},
			"credentials":{"variables":["K"]},"pass_variables":["B"],"endpoint":{"api":"`+api+`","secret":"K","base_url":"B"}}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Endpoints; len(got) != 1 || got[0].Secrets[0].Credential != cred || got[0].BaseURL != "B" || got[0].Default != "" {
			t.Errorf("%s: %+v", api, got)
		}
	}
	h, err := declarative.Parse("x.json", []byte(`{"kind":"cli","name":"x","program":"x","args":["{extra_args}"],"prompt":"stdin","output":{"format":"text"},
		"files":[{"path":".x/c.json","content":{}}],"endpoint":{"api":"openai-chat","secret":"K","base_url_key":".x/c.json#a.b"}}`), nil)
	if err != nil || h.Endpoints != nil {
		t.Errorf("base_url_key only: %+v %v", h, err)
	}
}

// TestEndpointBaseURLNotPassed: a preset file whose endpoint's base URL
// variable the preset never passes to the agent is refused at load with a
// configuration error naming the field (issue 43: it ran "gateway" while
// the CLI never got the gateway's address); passed either way, it loads.
func TestEndpointBaseURLNotPassed(t *testing.T) {
	file := func(pass string) []byte {
		return []byte(`{"kind":"cli","name":"x","program":"x","args":["{extra_args}"],"prompt":"stdin","output":{"format":"text"},
			"credentials":{"variables":["K"]},` + pass + `"endpoint":{"api":"openai-chat","secret":"K","base_url":"B"}}`)
	}
	_, err := declarative.Parse("x.json", file(""), nil)
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "endpoint.base_url") || !strings.Contains(fmt.Sprint(err), "pass_variables") {
		t.Fatalf("base URL not passed: %v (code %s), want a configuration error naming endpoint.base_url", err, outpost.CodeOf(err))
	}
	for _, pass := range []string{`"pass_variables":["B"],`, `"credentials":{"variables":["K","B"]},`} {
		if _, err := declarative.Parse("x.json", file(pass), nil); err != nil {
			t.Errorf("%s: %v", pass, err)
		}
	}
}
