package claude

import (
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Texts are matched in lower case, on their first MaxClassifiedText bytes
// (terminal messages are short and come first). "·" is U+00B7, as the CLI
// writes it.
const MaxClassifiedText = 8 << 10

var (
	// quotaFragments and quotaRE match the CLI's terminal usage, spend,
	// credit and rate limit messages (measured, and fragments of the
	// 2.1.332 binary):
	//   You've hit your 5-hour limit · resets 8:23pm (UTC)
	//   You've hit your session limit / monthly spend limit. / fast limit
	//   You've reached your Fable limit; you have reached your weekly usage limit
	//   usage limit reached …; Out of usage credits; You're out of extra usage
	//   Credit balance is too low; Budget limit reached ($…)
	//   spend limit reached · resets Aug 8 · request an increase at …
	//   API Error: Request rejected (429) · … rate limit …
	// and the credential gateway's refusal of a call a budget of outpost's
	// does not allow (gateway/meter: "API Error: 400 … outpost budget: …").
	quotaFragments = []string{"usage limit", "spend limit", "out of usage credits", "out of credits", "outpost budget:",
		"out of extra usage", "credit balance is too low", "credit balance too low", "budget limit reached",
		"request rejected (429)", "usage_limit_reached", "rate limit reached", "rate limit exceeded"}
	quotaRE = lazyre.New(`you['’]?ve (hit|reached) your [^\n]*limit|you have reached your [^\n]*limit|exceed(s|ed)? your [^\n]*rate limit`)

	// unavailableFragments and unavailableRE match terminal outages:
	// overload, 5xx, connection failures and timeouts, e.g.
	//   API Error: 529 Overloaded. This is a server-side issue, usually temporary …
	//   API Error: 500 Internal server error. …
	//   API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)
	//   Request timed out. If the API is slow to answer, …
	unavailableFragments = []string{"overloaded", "server-side issue", "internal server error", "bad gateway",
		"service unavailable", "gateway timeout", "gateway time-out", "connection refused", "connection reset",
		"connection error", "connection closed", "connection failed", "connection_failed", "socket hang up",
		"timed out", "unable to connect", "network error", "fetch failed"}
	unavailableRE = lazyre.New(`api error: 5\d\d\b|\be(connrefused|connreset|timedout|notfound|ai_again|hostunreach|netunreach|pipe)\b`)
)

// retryRE recognizes a retry notice: outpost's own (from system/api_retry
// lines: "…; retrying in 1.2s, attempt 1 of 2"), the raw api_retry line,
// and the CLI's interactive "Retrying in 5 seconds… (attempt 2/10)".
var retryRE = lazyre.New(`retrying|api_retry|\bretry(ing)? in \d|\battempt \d+ ?(of|/) ?\d+`)

// classifiable returns the part of text the classifiers read, in lower
// case, and false for a retry notice, which is progress, never terminal.
func classifiable(text string) (string, bool) {
	if len(text) > MaxClassifiedText {
		text = text[:MaxClassifiedText]
	}
	t := strings.ToLower(text)
	return t, !retryRE.MatchString(t)
}

func containsAny(s string, fragments []string) bool {
	for _, f := range fragments {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// Quota recognizes the CLI's terminal usage-limit, spend, credit and
// rate-limit texts (the failure event of an API error, a result's text).
// Retry notices never match.
func Quota(text string) bool {
	t, ok := classifiable(text)
	return ok && (containsAny(t, quotaFragments) || quotaRE.MatchString(t))
}

// Unavailable recognizes a terminal outage: overload, 5xx, connection
// failures and timeouts. Retry notices never match.
func Unavailable(text string) bool {
	t, ok := classifiable(text)
	return ok && (containsAny(t, unavailableFragments) || unavailableRE.MatchString(t))
}

// QuotaDetails extracts "resets_at" (RFC 3339, UTC) from a quota text:
// "resets at 2030-01-01T00:00:00Z", "resets 8:23pm (UTC)" (the next such
// time), "resets Jan 1, 2030, 12am (UTC)", "resets Aug 8" or "resets in
// 3h 20m". The time zone in parentheses is an IANA name or UTC; an unknown
// one gives no reset time rather than a wrong one. (The turn engine also
// takes the exact reset time from the failure event's details, decoded from
// the CLI's rate_limit_info, when the text has none.)
func QuotaDetails(text string) map[string]any {
	if t, ok := resetTime(text, time.Now()); ok {
		return map[string]any{"resets_at": t.UTC().Format(time.RFC3339)}
	}
	return nil
}

var (
	resetsAtRE  = lazyre.New(`(?i)resets? at (\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d))`)
	resetsInRE  = lazyre.New(`(?i)resets? in ((?:\d+\s*(?:d|days?|h|hrs?|hours?|m|mins?|minutes?|s|secs?|seconds?)\b[\s,]*(?:and\s+)?)+)`)
	resetsAbsRE = lazyre.New(`(?i)resets? (?:on |at )?` +
		`(?:(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* (\d{1,2})(?:st|nd|rd|th)?(?:,? (\d{4}))?)?` +
		`(?:,?\s*(?:at )?(\d{1,2})(?::(\d\d))?\s*(am|pm))?` +
		`(?:\s*\(([A-Za-z0-9_/+-]+)\))?`)
	durationPartRE = lazyre.New(`(?i)(\d+)\s*(d|days?|h|hrs?|hours?|m|mins?|minutes?|s|secs?|seconds?)\b`)
)

var months = map[string]time.Month{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}

// resetTime finds a reset time in text, relative to now where the text is.
func resetTime(text string, now time.Time) (time.Time, bool) {
	if len(text) > 64<<10 {
		text = text[:64<<10]
	}
	if m := resetsAtRE.FindStringSubmatch(text); m != nil {
		if t, err := time.Parse(time.RFC3339, m[1]); err == nil {
			return t, true
		}
	}
	if m := resetsInRE.FindStringSubmatch(text); m != nil {
		d, ok := resetsIn(m[1])
		if !ok {
			return time.Time{}, false
		}
		if d > 0 {
			return now.Add(d).Truncate(time.Second), true
		}
	}
	for _, m := range resetsAbsRE.FindAllStringSubmatch(text, -1) {
		switch t, v := resetsAbs(m, now); v {
		case absFound:
			return t, true
		case absRefused:
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}

// resetsIn adds up a relative reset time ("3h 20m"); false for a part too
// large to be one.
func resetsIn(parts string) (time.Duration, bool) {
	var d time.Duration
	for _, p := range durationPartRE.FindAllStringSubmatch(parts, -1) {
		n, err := strconv.Atoi(p[1])
		if err != nil || n > 1_000_000 {
			return 0, false
		}
		switch u := strings.ToLower(p[2]); {
		case strings.HasPrefix(u, "d"):
			d += time.Duration(n) * 24 * time.Hour
		case strings.HasPrefix(u, "h"):
			d += time.Duration(n) * time.Hour
		case strings.HasPrefix(u, "m"):
			d += time.Duration(n) * time.Minute
		default:
			d += time.Duration(n) * time.Second
		}
	}
	return d, true
}

// What one absolute reset time ("resets Jan 5, 3pm (UTC)") gave.
const (
	absSkipped = iota // not a time: try the next match
	absFound
	absRefused // an unknown zone: no time at all
)

// resetsAbs reads one match of resetsAbsRE as the next such time after now.
func resetsAbs(m []string, now time.Time) (time.Time, int) {
	mon, day, year, hour, minute, ampm, zone := m[1], m[2], m[3], m[4], m[5], m[6], m[7]
	if mon == "" && hour == "" {
		return time.Time{}, absSkipped
	}
	loc := time.UTC
	if zone != "" && !strings.EqualFold(zone, "UTC") && !strings.EqualFold(zone, "GMT") {
		l, err := time.LoadLocation(zone)
		if err != nil {
			return time.Time{}, absRefused
		}
		loc = l
	}
	local := now.In(loc)
	h, mi := 0, 0
	if hour != "" {
		h, _ = strconv.Atoi(hour)
		mi, _ = strconv.Atoi(minute)
		if h < 1 || h > 12 || mi > 59 {
			return time.Time{}, absSkipped
		}
		h %= 12
		if strings.EqualFold(ampm, "pm") {
			h += 12
		}
	}
	if mon == "" {
		t := time.Date(local.Year(), local.Month(), local.Day(), h, mi, 0, 0, loc)
		if !t.After(now) {
			t = t.AddDate(0, 0, 1)
		}
		return t, absFound
	}
	dd, _ := strconv.Atoi(day)
	if dd < 1 || dd > 31 {
		return time.Time{}, absSkipped
	}
	y := local.Year()
	explicitYear := year != ""
	if explicitYear {
		y, _ = strconv.Atoi(year)
	}
	t := time.Date(y, months[strings.ToLower(mon[:3])], dd, h, mi, 0, 0, loc)
	if t.Day() != dd {
		return time.Time{}, absSkipped // no such date (Feb 31)
	}
	if !explicitYear && !t.After(now) {
		t = time.Date(y+1, months[strings.ToLower(mon[:3])], dd, h, mi, 0, 0, loc)
	}
	return t, absFound
}

// authFragments are the CLI's texts for credentials the API or the CLI
// refused (lower case).
var authFragments = []string{"not logged in", "invalid api key", "authentication_error", "please run /login", "oauth token has expired", "invalid bearer token", "permission_error"}

// Misconfigured recognizes refused credentials: an invalid or expired key
// or token (401/403), or a CLI that is not logged in. Retry notices never
// match.
func Misconfigured(text string) bool {
	t, ok := classifiable(text)
	return ok && containsAny(t, authFragments)
}
