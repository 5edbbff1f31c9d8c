package copilot

import "testing"

func TestMisconfigured(t *testing.T) {
	for text, want := range map[string]bool{
		"Last error: 401 x\n(copilot error type: authentication, HTTP 401)": true,
		"Error: No authentication information found.":                       true,
		"Last error: 500 x\n(copilot error type: query, HTTP 500)":          false,
		"(copilot error type: rate_limit, HTTP 429)":                        false,
	} {
		if got := Misconfigured(text); got != want {
			t.Errorf("Misconfigured(%q) = %v, want %v", text, got, want)
		}
	}
}
