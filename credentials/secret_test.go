package credentials

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLooksSecret(t *testing.T) {
	tests := map[string]bool{
		"ANTHROPIC_API_KEY":      true,
		"openai_api_key":         true,
		"GITHUB_TOKEN":           true,
		"CLIENT_SECRET":          true,
		"DB_PASSWORD":            true,
		"PASSWD":                 true,
		"GOOGLE_CREDENTIALS":     true,
		"AWS_CREDENTIAL_FILE":    true,
		"OAUTH_CLIENT":           true,
		"Authorization":          true,
		"PROXY_AUTHORIZATION":    true,
		"DBPASS":                 true,
		"SMTP_PASS":              true,
		"MYSQL_PWD":              true,
		"DB_PWD":                 true,
		"GH_CREDS":               true,
		"BASIC_AUTH":             true,
		"PRIVATE_DATA":           true,
		"SESSION_ID":             true,
		"browser_cookie":         true,
		"AUTHOR_AUTH":            true,
		"GIT_AUTHOR_NAME":        false,
		"GIT_AUTHOR_EMAIL":       false,
		"NO_PROXY_BYPASS":        false,
		"PASSTHROUGH_ARGS":       false,
		"COMPASS_HEADING":        false,
		"PATH":                   false,
		"HOME":                   false,
		"MODEL":                  false,
		"PWD":                    false,
		"OLDPWD":                 false,
		"FOO_SETTING":            false,
		"CLAUDE_CODE_USE_VERTEX": false,
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			if got := LooksSecret(name); got != want {
				t.Errorf("LooksSecret(%q) = %v, want %v", name, got, want)
			}
		})
	}
}

// Key-shaped values, made up for the test (never real keys).
const (
	testAnthropicKey = "sk-ant-api03-Zq8vX2mN4pL6rT1wY9bC3dF5gH7jK0sA"
	testOpenAIKey    = "sk-proj-4fGh7Jk2Lm9Np3Qr6St8Uv1Wx5Yz0Ab"
	testGitHubPAT    = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789"
	testRandom40     = "q7Rk2PzX9mVb4TnL8wYc3HsJ6dFg1KeA5uNo0iQx"
	testPEM          = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
)

func TestKeyShaped(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{testAnthropicKey, []string{testAnthropicKey}},
		{testOpenAIKey, []string{testOpenAIKey}},
		{"ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", []string{"ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"}},
		{"gho_16C7e42F292c6912E7710c838347Ae178B4a", []string{"gho_16C7e42F292c6912E7710c838347Ae178B4a"}},
		{testGitHubPAT, []string{testGitHubPAT}},
		{"xoxb-2048-1024-Rz5tUvWx9YaBcDeF", []string{"xoxb-2048-1024-Rz5tUvWx9YaBcDeF"}},
		{"AKIAIOSFODNN7EXAMPLE", []string{"AKIAIOSFODNN7EXAMPLE"}},
		{"AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v", []string{"AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v"}},
		{"glpat-xY12zW34vU56tS78rQ90", []string{"glpat-xY12zW34vU56tS78rQ90"}},
		{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", []string{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"}},
		{"Bearer " + testOpenAIKey, []string{testOpenAIKey}},
		{"--token=" + testAnthropicKey + " --verbose", []string{testAnthropicKey}},
		{testPEM, []string{testPEM}},
		{testRandom40, []string{testRandom40}},
		{"postgres://app:hunter22@db.internal:5432/app?sslmode=disable", []string{"hunter22"}},
		{"https://user:p%40ss@example.test/x https://other:second@example.test", []string{"p%40ss", "second"}},
		{"postgres://app@db.internal/app", nil},
		{"https://example.test:8443/path", nil},
		{"https://example.test/cb?sig=" + testRandom40, []string{testRandom40}},
		// Not keys: too short after the prefix, a prefix inside a word,
		// paths, words, ids, digests, identifiers.
		{"sk-echo-7f3a9c1e5b", nil},
		{"task-runner-ghp_abcdefghijklmnopqrstuvwxyz", nil},
		{"abc", nil},
		{"", nil},
		{"/usr/local/bin:/usr/bin:/bin", nil},
		{"/home/someone/Projects/MyApplication2024/src/main/java/Example.java", nil},
		{"github.com/outposthq/outpost/credentials", nil},
		{"123e4567-e89b-12d3-a456-426614174000", nil},
		{"123E4567-E89B-12D3-A456-426614174000", nil},
		{"01JDQ4ZJ7X8Y9Z0A1B2C3D4E5F", nil},
		{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", nil},
		{"ThisIsAVeryLongIdentifierName2024", nil},
		{"TestEnvironmentPrecedenceWithManyLayers1", nil},
		{"CLAUDE_CODE_USE_VERTEX_AND_SOME_MORE_1", nil},
		{"my_Long_identifier_name_with_Version2", nil},
		{"claude-sonnet-4-5-20250929", nil},
		{"the quick brown fox jumps over the lazy dog 12 times", nil},
		{"XYZ123abcXYZ123abcXYZ123abcXYZ123abc", nil},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			if d := cmp.Diff(tt.want, KeyShaped(tt.value)); d != "" {
				t.Errorf("KeyShaped(%q) (-want +got):\n%s", tt.value, d)
			}
		})
	}
}

func TestSecretValues(t *testing.T) {
	tests := []struct {
		name, value string
		want        []string
	}{
		{"DBPASS", "hunter22", []string{"hunter22"}},
		{"FOO_SETTING", "abc", nil},
		{"FOO_SETTING", testOpenAIKey, []string{testOpenAIKey}},
		{"EXTRA_ARGS", "--key " + testOpenAIKey, []string{"--key " + testOpenAIKey, testOpenAIKey}},
		{"PWD", "/work/src", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			if d := cmp.Diff(tt.want, SecretValues(tt.name, tt.value)); d != "" {
				t.Errorf("SecretValues (-want +got):\n%s", d)
			}
			if got, want := IsSecret(tt.name, tt.value), tt.want != nil; got != want {
				t.Errorf("IsSecret = %v, want %v", got, want)
			}
		})
	}
	// A redactor given SecretValues masks the key where it shows alone.
	r := NewRedactor(SecretValues("EXTRA_ARGS", "--key "+testOpenAIKey)...)
	if got := r.String("using " + testOpenAIKey); strings.Contains(got, testOpenAIKey) {
		t.Errorf("key not redacted: %q", got)
	}
}
