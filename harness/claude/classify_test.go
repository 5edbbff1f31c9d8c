package claude

import (
	"testing"
	"time"
)

func TestQuotaAndUnavailable(t *testing.T) {
	cases := []struct {
		text               string
		quota, unavailable bool
	}{
		// Measured (cli-facts §6 and the golden recordings).
		{"You've hit your 5-hour limit · resets 8:23pm (UTC)", true, false},
		{"You've hit your 5-hour limit · resets Jan 1, 2030, 12am (UTC)", true, false},
		{"API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit (fake)", true, false},
		{"API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.", true, false},
		{"Credit balance is too low", true, false},
		// The credential gateway's refusal as Claude Code 2.1.332 shows it
		// (integration's TestRunBudgetRefusedTurn).
		{"API Error: 400 outpost budget: the conversation budget of 101037 tokens has 1000 tokens left (100037 used), fewer than the next model call's prompt needs (about 19711 tokens); the API was not called (a token budget of outpost's, not your Anthropic account's balance)", true, false},
		{"API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:18522).", false, true},
		{"API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment.", false, true},
		{"API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)", false, true},
		{"Request timed out. If the API is slow to answer, or a proxy or gateway holds responses, set API_TIMEOUT_MS above 5000.", false, true},
		{"Invalid API key · Fix external API key", false, false},
		{"Not logged in · Please run /login", false, false},
		{"Failed to authenticate. API Error: 403 Your API key does not have permission to use the specified resource.", false, false},
		{"API Error: 400 messages: fake bad request", false, false},
		{"No conversation found with session ID: 99999999-8888-4777-8666-555555555555", false, false},
		// Fragments of the binary.
		{"You've hit your session limit", true, false},
		{"You’ve reached your Fable limit", true, false},
		{"you have reached your weekly usage limit", true, false},
		{"You've hit your monthly spend limit.", true, false},
		{"Your organization is out of usage credits.", true, false},
		{"You're out of extra usage", true, false},
		{"Budget limit reached ($5.00)", true, false},
		{"spend limit reached · resets Aug 8 · request an increase at https://example.invalid", true, false},
		{"Context limit reached · /compact or /clear to continue", false, false},
		// Retry notices are never terminal, whatever they say.
		{"API request failed (429 rate_limit); retrying in 1.176s, attempt 1 of 1", false, false},
		{"API request failed (529 overloaded); retrying in 602ms, attempt 1 of 1", false, false},
		{"Rate limit reached. Retrying in 5 seconds… (attempt 2/10)", false, false},
		{`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":602,"error_status":529,"error":"overloaded"}`, false, false},
		{"API Error: Request rejected (429) · rate limit exceeded, please retry later", true, false},
		{"API Error: 503 Service Unavailable; do not retry before 30s", false, true},
		{"Hello from the fake model.", false, false},
		{"", false, false},
	}
	for _, c := range cases {
		if got := Quota(c.text); got != c.quota {
			t.Errorf("Quota(%q) = %v", c.text, got)
		}
		if got := Unavailable(c.text); got != c.unavailable {
			t.Errorf("Unavailable(%q) = %v", c.text, got)
		}
	}
}

func TestResetTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)
	cases := []struct {
		text string
		want string // RFC 3339, "" = none
	}{
		{"You've hit your 5-hour limit · resets 8:23pm (UTC)", "2026-11-29T20:23:00Z"},
		{"You've hit your 5-hour limit · resets 6pm (UTC)", "2026-11-30T18:00:00Z"},
		{"You've hit your 5-hour limit · resets Jan 1, 2030, 12am (UTC)", "2030-01-01T00:00:00Z"},
		{"You've hit your 5-hour limit · resets Jan 1, 2030, 12:30pm (UTC)", "2030-01-01T12:30:00Z"},
		{"You've hit your weekly limit · resets Dec 2, 9am (Europe/Paris)", "2026-12-02T08:00:00Z"},
		{"spend limit reached · resets Aug 8 · request an increase", "2027-08-08T00:00:00Z"},
		{"usage limit reached, resets in 3h 20m", "2026-11-29T22:20:00Z"},
		{"limit; resets at 2030-01-01T00:00:00Z.", "2030-01-01T00:00:00Z"},
		{"You've hit your 5-hour limit · resets 8:23pm (Mars/Olympus_Mons)", ""},
		{"API Error: Request rejected (429) · This request would exceed your account's rate limit.", ""},
		{"resets 13pm (UTC)", ""},
		{"resets Feb 31", ""},
	}
	for _, c := range cases {
		got, ok := resetTime(c.text, now)
		s := ""
		if ok {
			s = got.UTC().Format(time.RFC3339)
		}
		if s != c.want {
			t.Errorf("resetTime(%q) = %q, want %q", c.text, s, c.want)
		}
	}
	if d := QuotaDetails("You've hit your 5-hour limit · resets Jan 1, 2030, 12am (UTC)"); d["resets_at"] != "2030-01-01T00:00:00Z" {
		t.Errorf("QuotaDetails = %v", d)
	}
	if d := QuotaDetails("Credit balance is too low"); d != nil {
		t.Errorf("QuotaDetails without a time = %v", d)
	}
}
