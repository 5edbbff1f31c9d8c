package codex

import "testing"

func TestMisconfigured(t *testing.T) {
	for text, want := range map[string]bool{
		"unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1/v1/responses": true,
		"Missing environment variable: `OPENAI_API_KEY`.":                                                    true,
		"Reconnecting... 1/5 (unexpected status 401 Unauthorized)":                                           false,
		"unexpected status 503 Service Unavailable: overloaded":                                              false,
	} {
		if got := Misconfigured(text); got != want {
			t.Errorf("Misconfigured(%q) = %v, want %v", text, got, want)
		}
	}
}
