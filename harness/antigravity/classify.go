package antigravity

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// ErrorPrefix starts the line agy (1.2.6 and later) writes on standard
// error when a turn fails on the model, the agent or the API, before it
// exits with status 3:
//
//	AGY_ERROR: {"status":"RESOURCE_EXHAUSTED","error_code":429,"retryable":false,"error_id":"…","short_error":"…"}
const ErrorPrefix = "AGY_ERROR:"

// AGYError is the JSON object of an AGY_ERROR line.
type AGYError struct {
	Status     string `json:"status"`      // a gRPC-style status: RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED, …
	ErrorCode  int    `json:"error_code"`  // the HTTP-style code: 429, 503, …
	Retryable  *bool  `json:"retryable"`   // nil when absent
	ErrorID    string `json:"error_id"`    //
	ShortError string `json:"short_error"` // e.g. "RESOURCE_EXHAUSTED (code 429): Individual quota reached. … Resets in 146h14m2s."
}

// ParseError decodes the AGY_ERROR line in text (a stderr line, or text
// holding one). ok is false when text has none or its JSON is invalid.
func ParseError(text string) (AGYError, bool) {
	i := strings.Index(text, ErrorPrefix)
	if i < 0 {
		return AGYError{}, false
	}
	var e AGYError
	dec := json.NewDecoder(bytes.NewReader([]byte(strings.TrimSpace(text[i+len(ErrorPrefix):]))))
	if err := dec.Decode(&e); err != nil {
		return AGYError{}, false
	}
	return e, true
}

// quota reports whether a parsed AGY_ERROR is a usage limit.
func (e AGYError) quota() bool {
	return e.Status == "RESOURCE_EXHAUSTED" || e.ErrorCode == 429
}

// outage reports whether a parsed AGY_ERROR is an outage: the service
// unavailable, failing or timing out, or any other error agy calls
// retryable.
func (e AGYError) outage() bool {
	if e.quota() {
		return false
	}
	switch e.Status {
	case "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN":
		return true
	case "UNAUTHENTICATED", "PERMISSION_DENIED", "INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND":
		return false
	}
	return e.ErrorCode >= 500 || (e.Retryable != nil && *e.Retryable)
}

var (
	quotaTextRE  = lazyre.New(`RESOURCE_EXHAUSTED|(?i:\bquota (reached|exceeded|exhausted)\b|exhausted your (daily |weekly )?quota)`)
	outageTextRE = lazyre.New(`\b(UNAVAILABLE|DEADLINE_EXCEEDED)\b|(?i:\boverloaded\b|fetch failed|connection (refused|reset)|service unavailable)`)
	resetRE      = lazyre.New(`(?i)resets? in ((?:\d+(?:\.\d+)?(?:ms|d|h|m|s)\s*)+)`)
	resetPartRE  = lazyre.New(`(\d+(?:\.\d+)?)(ms|d|h|m|s)`)
)

// Quota recognizes a terminal usage limit: an AGY_ERROR line whose status
// is RESOURCE_EXHAUSTED (or code 429), or a failure text that says so
// ("RESOURCE_EXHAUSTED (code 429): Individual quota reached. …").
func Quota(text string) bool {
	if e, ok := ParseError(text); ok {
		return e.quota()
	}
	if !strings.Contains(text, "RESOURCE_EXHAUSTED") && !strings.Contains(text, "uota") {
		return false // cheap filter: hooks see every stderr line
	}
	return quotaTextRE.MatchString(text)
}

// QuotaDetails extracts "resets_at" (RFC 3339, UTC, rounded up to the
// second) from "Resets in 146h14m2s" (also days: "2d3h"), counted from
// now; nil when the text names no reset.
func QuotaDetails(text string) map[string]any {
	if e, ok := ParseError(text); ok && e.ShortError != "" {
		text = e.ShortError
	}
	if r := resetsAt(text, time.Now()); r != "" {
		return map[string]any{"resets_at": r}
	}
	return nil
}

func resetsAt(text string, from time.Time) string {
	if !strings.Contains(text, "eset") {
		return ""
	}
	m := resetRE.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	var d time.Duration
	for _, p := range resetPartRE.FindAllStringSubmatch(m[1], -1) {
		n, err := strconv.ParseFloat(p[1], 64)
		if err != nil {
			return ""
		}
		unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[strings.ToLower(p[2])]
		d += time.Duration(n * float64(unit))
		if d < 0 || d > kit.MaxWait {
			return ""
		}
	}
	return kit.ResetsAt(from, d)
}

// Unavailable recognizes a terminal outage: an AGY_ERROR line with status
// UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED (…), a 5xx code or
// retryable:true (a usage limit excepted), or a failure text naming one.
// Authentication errors (UNAUTHENTICATED) are not outages.
func Unavailable(text string) bool {
	if e, ok := ParseError(text); ok {
		return e.outage()
	}
	if Quota(text) {
		return false
	}
	return outageTextRE.MatchString(text)
}
