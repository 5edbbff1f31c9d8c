package gemini

import "strings"

// The CLI's terminal texts, measured against the fake Gemini API with the
// pinned CLI (docs/presets/gemini.md). A failed turn ends with a result
// line whose error.message is "[API Error: <text>]" plus, for a quota, a
// suggestion; the CLI also prints "Error when talking to Gemini API …
// <ErrorClass>: <text>" on standard error. Its retry notices, on standard
// error, start "Attempt N failed" and never match.
var (
	// quotaTexts: a spent daily quota (QuotaFailure PerDay: no retry) and
	// a 429 that outlived the retries.
	quotaTexts = []string{
		"You have exhausted your daily quota",
		"Resource has been exhausted",
		"TerminalQuotaError",
		"exceeded your current quota, please check your plan",
	}
	// outageTexts: an overloaded or failing server after the retries, a
	// connection that could not be made, and a reply whose stream broke
	// off (undici's "terminated", caused by "other side closed"), which
	// the CLI does not retry.
	outageTexts = []string{
		"The model is overloaded",
		"fetch failed",
		"[API Error: terminated]",
		"UND_ERR_SOCKET",
		`"status":"UNAVAILABLE"`,
		`"status":"INTERNAL"`,
		"ECONNREFUSED",
		"ECONNRESET",
		"ETIMEDOUT",
		"ENOTFOUND",
		"Service Unavailable",
	}
	// misconfiguredTexts: refused or missing credentials.
	misconfiguredTexts = []string{
		"API key not valid",
		"Invalid auth method selected",
		"Please set an Auth method",
		"When using Gemini API, you must specify the GEMINI_API_KEY",
		`"status":"PERMISSION_DENIED"`,
		`"status":"UNAUTHENTICATED"`,
	}
)

// retryNotice reports whether text is one of the CLI's retry notices
// ("Attempt 2 failed with status 503. Retrying with backoff...").
func retryNotice(text string) bool {
	return strings.Contains(text, "Attempt ") && strings.Contains(text, "Retrying")
}

func containsAny(text string, subs []string) bool {
	if retryNotice(text) {
		return false
	}
	for _, s := range subs {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// Quota recognizes a terminal quota or rate limit.
func Quota(text string) bool { return containsAny(text, quotaTexts) }

// Unavailable recognizes a terminal outage: overload, 5xx, no connection,
// a broken stream.
func Unavailable(text string) bool { return containsAny(text, outageTexts) }

// Misconfigured recognizes refused or missing credentials.
func Misconfigured(text string) bool { return containsAny(text, misconfiguredTexts) }
