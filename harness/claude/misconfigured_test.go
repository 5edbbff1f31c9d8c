package claude

import "testing"

func TestMisconfigured(t *testing.T) {
	for text, want := range map[string]bool{
		"Invalid API key · Fix external API key":                                  true,
		"Not logged in · Please run /login":                                       true,
		`API Error: 401 {"type":"error","error":{"type":"authentication_error"}}`: true,
		"API Error: 529 Overloaded":                                               false,
		"Claude AI usage limit reached|1893456000":                                false,
	} {
		if got := Misconfigured(text); got != want {
			t.Errorf("Misconfigured(%q) = %v, want %v", text, got, want)
		}
	}
}
