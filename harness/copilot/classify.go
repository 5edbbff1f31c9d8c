package copilot

import (
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

var (
	// quotaMarkerRE matches the marker line of a session.error whose type
	// is a usage or rate limit. BYOK reports both a provider's rate limit
	// and its exhausted quota (insufficient_quota) as rate_limit; GitHub's
	// service also uses quota. Both are terminal: the CLI has already
	// retried five times.
	quotaMarkerRE = lazyre.New(`\(copilot error type: (rate_limit|quota)\b`)

	// quotaTextRE matches the CLI's own terminal texts for GitHub's limits
	// (from its runtime strings), for when one arrives as plain text on
	// standard error. Retry notices never carry them.
	quotaTextRE = lazyre.New(`You've hit (your|the) (session )?rate limit|You've reached your (weekly|session) rate limit|` +
		`You've run out of your (included )?AI credits|You've reached the spending limit for this session|` +
		`You've reached your additional usage limit|You've used all your Copilot Free chat requests|` +
		`Increase or remove the session limit to continue`)

	// outageRE matches a failure caused by the provider or the network: a
	// 5xx, a refused or broken connection, a stream cut short.
	outageRE = lazyre.New(`(?i)last error: 5\d\d\b|\(copilot error type: \w+, HTTP 5\d\d\b|could not connect to|` +
		`error (sending|decoding|reading)|failed native model http request|connection (refused|reset|closed)|` +
		`timed? ?out|overloaded|service unavailable|network fetch failed|unexpected eof`)

	// stderrOutages are the CLI's plain-text network failures. With
	// JSON output the CLI writes to standard error only when it gives up
	// before the session starts (e.g. "Authentication token found but
	// could not be validated." then "Failed to fetch PAT user login:
	// network fetch failed: …" on the next line).
	stderrOutages = []string{"network fetch failed", "Could not connect to", "could not connect to", "error sending request", "Connection refused", "connection refused", "Connection reset", "connection reset"}

	// resetRE finds a wait in a limit message: "Please try again in 1s.",
	// "try again in 1m30s", "resets in 2h".
	resetRE = lazyre.New(`(?i)(?:try again in|resets? in|retry after) ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)`)
)

// Quota recognizes a terminal usage or rate limit: a failure event of a
// session.error typed rate_limit or quota (the decoder writes the type into
// the text, see Decoder), or one of the CLI's texts for GitHub's limits.
// Retry notices do not match: the CLI retries a 429 five times, printing
// assistant.turn_retry lines, before it gives up with session.error.
func Quota(text string) bool {
	// Cheap substring checks first: the hooks see every failure text and
	// stderr line, some of them megabytes long.
	if strings.Contains(text, failureMarker) && quotaMarkerRE.MatchString(text) {
		return true
	}
	return (strings.Contains(text, "You've") || strings.Contains(text, "session limit")) && quotaTextRE.MatchString(text)
}

// QuotaDetails extracts "resets_at" (RFC 3339, UTC) from a limit message
// that says how long to wait ("Please try again in 1s."), counted from
// now; the failure event's own details, counted from the line's timestamp,
// take precedence in the engine. Nil when the text names no wait.
func QuotaDetails(text string) map[string]any {
	if !mayNameWait(text) {
		return nil
	}
	if r := resetsAt(text, time.Now()); r != "" {
		return map[string]any{"resets_at": r}
	}
	return nil
}

// mayNameWait is a cheap filter before resetRE.
func mayNameWait(text string) bool {
	return strings.Contains(text, "again in") || strings.Contains(text, "esets in") || strings.Contains(text, "eset in") || strings.Contains(text, "etry after")
}

// resetsAt is from plus the wait text names, as RFC 3339, or "".
func resetsAt(text string, from time.Time) string {
	if !mayNameWait(text) {
		return ""
	}
	m := resetRE.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	d, err := time.ParseDuration(strings.ToLower(m[1]))
	if err != nil {
		return ""
	}
	return kit.ResetsAt(from, d)
}

// Unavailable recognizes a terminal outage: a failure whose message shows
// a 5xx answer, a connection that could not be made or broke, or a stream
// cut short (the CLI types all of these "query"), and the CLI's plain-text
// failures to reach GitHub or the provider on standard error ("network
// fetch failed", "could not connect to"). Authentication and request errors
// (401, 400) are not outages. Retry notices do not match.
func Unavailable(text string) bool {
	if strings.Contains(text, failureMarker) {
		if !strings.Contains(text, failureMarker+"query") && !strings.Contains(text, failureMarker+"unknown") {
			return false
		}
		return outageRE.MatchString(text)
	}
	for _, s := range stderrOutages {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// Misconfigured recognizes refused credentials: a session.error typed
// authentication, or the CLI finding no credentials at all. Retry notices
// do not match.
func Misconfigured(text string) bool {
	return strings.Contains(text, "(copilot error type: authentication") ||
		strings.Contains(text, "No authentication information found")
}
