package codex

import (
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// The texts below were measured with codex-cli 0.171.0 (testdata/golden,
// docs/presets/codex.md). Codex appends the upstream error body and a
// request id to many of them, so they are matched by their beginning, and
// the retry notices it prints while it still tries ("Reconnecting... 1/5
// (…)", "Reconnecting... waiting for network (…)") never match, even though
// they quote the same texts.

// Quota kinds, the "quota" detail of a quota failure.
const (
	QuotaUsageLimit        = "usage_limit"        // ChatGPT plan limit (429 usage_limit_reached)
	QuotaInsufficientQuota = "insufficient_quota" // API billing quota (429 insufficient_quota)
	QuotaRateLimit         = "rate_limit"         // 429 rate_limit_exceeded after the retries
)

// retryPrefix starts every transient retry notice.
const retryPrefix = "Reconnecting..."

// isRetry reports whether text is one of Codex's retry notices.
func isRetry(text string) bool {
	return strings.HasPrefix(strings.TrimSpace(text), retryPrefix)
}

// normalize makes the curly apostrophes Codex uses straight.
func normalize(text string) string {
	text = strings.TrimSpace(text)
	if !strings.ContainsAny(text, "\u2018\u2019") {
		return text
	}
	return apostrophes.Replace(text)
}

var apostrophes = strings.NewReplacer("\u2019", "'", "\u2018", "'")

// quotaKind returns the quota kind of a terminal failure text, or "".
func quotaKind(text string) string {
	if isRetry(text) {
		return ""
	}
	t := normalize(text)
	switch {
	case strings.Contains(t, "You've hit your usage limit"), strings.Contains(t, "["+infoUsageLimitExceeded+"]"):
		return QuotaUsageLimit
	case strings.HasPrefix(t, "Quota exceeded. Check your plan and billing details"):
		return QuotaInsufficientQuota
	case strings.HasPrefix(t, "exceeded retry limit, last status: 429"),
		strings.Contains(t, "["+infoRateLimitExceeded+"]"),
		strings.Contains(t, "["+infoTooManyFailedAttempts+" 429]"):
		return QuotaRateLimit
	}
	return ""
}

// Quota recognizes Codex's terminal usage-limit, billing-quota and
// rate-limit texts (exec's error and turn.failed messages, and the
// app-server's, tagged with their codexErrorInfo). Retry notices never
// match.
func Quota(text string) bool { return quotaKind(text) != "" }

var (
	statusRE  = lazyre.New(`(?:last status|unexpected status): (\d{3})\b`)
	retryInRE = lazyre.New(`(?i)try again in ((?:\d+\s*(?:days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)[,\s]*(?:and\s+)?)+)`)
	partRE    = lazyre.New(`(?i)(\d+)\s*(day|hour|hr|minute|min|second|sec)`)
)

// QuotaDetails returns the facts of a text Quota matched: "quota" (one of
// the Quota* kinds), "status" (the HTTP status when the text names one)
// and "resets_at" (RFC 3339, when the text says "try again in 2 hours 5
// minutes").
func QuotaDetails(text string) map[string]any {
	kind := quotaKind(text)
	if kind == "" {
		return nil
	}
	d := map[string]any{"quota": kind}
	if m := statusRE.FindStringSubmatch(text); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			d["status"] = n
		}
	}
	if m := retryInRE.FindStringSubmatch(text); m != nil {
		var total time.Duration
		for _, p := range partRE.FindAllStringSubmatch(m[1], 8) {
			n, err := strconv.Atoi(p[1])
			if err != nil || n > 100000 {
				continue
			}
			unit := map[string]time.Duration{"day": 24 * time.Hour, "hour": time.Hour, "hr": time.Hour, "minute": time.Minute, "min": time.Minute, "second": time.Second, "sec": time.Second}[strings.ToLower(p[2])]
			total += time.Duration(n) * unit
		}
		if total > 0 {
			d["resets_at"] = time.Now().Add(total).UTC().Truncate(time.Second).Format(time.RFC3339)
		}
	}
	return d
}

// unavailablePrefixes begin Codex's terminal outage texts.
var unavailablePrefixes = []string{
	"We're currently experiencing high demand",  // 500
	"stream disconnected before completion",     // dropped, truncated, response.failed, no response, idle timeout
	"Connection failed",                         // refused connections, when they are reported as terminal
	"error sending request",                     // transport errors
	"Codex is currently experiencing high load", // overload wording of other releases
	"The model is currently overloaded",         // idem
	"exceeded retry limit, last status: 5",      // 5xx after the retries
}

var status5xxRE = lazyre.New(`^unexpected status 5\d\d\b`)

// unavailableInfo are the codexErrorInfo tags of outages (app-server).
var unavailableInfo = []string{
	"[" + infoInternalServerError + "]",
	"[serverOverloaded]",
	"[policyCapacityUnavailable]",
	"[flexUnavailable]",
	"[responseStreamDisconnected]",
	"[responseStreamConnectionFailed]",
	"[httpConnectionFailed]",
}

var infoStatusRE = lazyre.New(`\[(?:responseStreamDisconnected|responseStreamConnectionFailed|httpConnectionFailed|responseTooManyFailedAttempts) 5\d\d\]`)

// Unavailable recognizes Codex's terminal outage and connection-failure
// texts: 5xx answers ("We’re currently experiencing high demand…",
// "unexpected status 503 …"), dropped or truncated streams, failed
// responses, idle streams and transport errors ("stream disconnected before
// completion: …"), and in app-server mode the matching codexErrorInfo tags.
// Retry notices never match, nor do 4xx answers (401 is an auth problem,
// 429 a quota).
func Unavailable(text string) bool {
	if isRetry(text) || Quota(text) {
		return false
	}
	t := normalize(text)
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	if status5xxRE.MatchString(t) || infoStatusRE.MatchString(t) {
		return true
	}
	for _, tag := range unavailableInfo {
		if strings.Contains(t, tag) {
			return true
		}
	}
	return false
}

// failureKind is the Kind of a failure event with text.
func failureKind(text string) string {
	switch {
	case Quota(text):
		return "rate_limit"
	case Unavailable(text):
		return "unavailable"
	}
	t := normalize(text)
	switch {
	case strings.Contains(t, "ran out of room in the model's context window"), strings.Contains(t, "[contextWindowExceeded]"):
		return "context_window"
	case strings.HasPrefix(t, "unexpected status 401"), strings.HasPrefix(t, "unexpected status 403"),
		strings.HasPrefix(t, "Missing environment variable"), strings.Contains(t, "[unauthorized]"),
		strings.Contains(t, "[httpConnectionFailed 401]"), strings.Contains(t, "[httpConnectionFailed 403]"):
		return "auth"
	}
	return ""
}

// codexErrorInfo names (app-server), as far as the classification uses them.
const (
	infoUsageLimitExceeded    = "usageLimitExceeded"
	infoRateLimitExceeded     = "rateLimitExceeded"
	infoTooManyFailedAttempts = "responseTooManyFailedAttempts"
	infoInternalServerError   = "internalServerError"
)

// Misconfigured recognizes refused credentials and missing settings: a 401
// or 403 answer, a missing key variable, app-server's unauthorized tag.
// Retry notices never match.
func Misconfigured(text string) bool {
	return !isRetry(text) && failureKind(text) == "auth"
}
