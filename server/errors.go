package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
)

// Reasons refine an error's code in details.reason, for the API's own
// refusals. The HTTP status follows from the code and the reason
// (status, documented in docs/serve.md).
const (
	ReasonBadRequest   = "bad_request"  // malformed JSON, unknown field, invalid value (400)
	ReasonUnauthorized = "unauthorized" // no or wrong bearer token (401)
	ReasonForbidden    = "forbidden"    // another user on the Unix socket (403)
	// ReasonPolicy (403): a request the client policy refuses (policy.go).
	ReasonNotFound    = "not_found"         // no such turn, conversation or route (404)
	ReasonMethod      = "method"            // method not allowed (405)
	ReasonConflict    = "conflict"          // a finished turn, a conversation in use (409)
	ReasonTooLarge    = "too_large"         // body over the limit (413)
	ReasonBusy        = "busy"              // concurrency and queue full (429, Retry-After)
	ReasonDraining    = "draining"          // the server is shutting down (503)
	ReasonStore       = "store_unavailable" // a fleet's turn store failed (503, Retry-After)
	ReasonUnsupported = "unsupported"       // a feature this server does not offer, e.g. a race without checkpoints (501)
	ReasonInternal    = "internal_error"    // a bug (500)
)

var reasonStatus = map[string]int{
	ReasonBadRequest:   http.StatusBadRequest,
	ReasonUnauthorized: http.StatusUnauthorized,
	ReasonForbidden:    http.StatusForbidden,
	ReasonPolicy:       http.StatusForbidden,
	ReasonNotFound:     http.StatusNotFound,
	ReasonMethod:       http.StatusMethodNotAllowed,
	ReasonConflict:     http.StatusConflict,
	ReasonTooLarge:     http.StatusRequestEntityTooLarge,
	ReasonBusy:         http.StatusTooManyRequests,
	ReasonDraining:     http.StatusServiceUnavailable,
	ReasonStore:        http.StatusServiceUnavailable,
	ReasonUnsupported:  http.StatusNotImplemented,
	ReasonInternal:     http.StatusInternalServerError,
}

// codeStatus maps an outpost code to a status when no reason says more.
var codeStatus = map[outpost.Code]int{
	outpost.Configuration: http.StatusBadRequest,
	outpost.Refused:       http.StatusConflict,
	outpost.Conversation:  http.StatusNotFound,
	outpost.Sandbox:       http.StatusServiceUnavailable,
	outpost.Bootstrap:     http.StatusServiceUnavailable,
	outpost.Process:       http.StatusBadGateway,
	outpost.Quota:         http.StatusTooManyRequests,
	outpost.Timeout:       http.StatusGatewayTimeout,
	outpost.Cancelled:     http.StatusConflict,
}

// apiError is an error with its HTTP status.
type apiError struct {
	status     int
	err        *outpost.Error
	retryAfter int // seconds, for 429 and 503
}

func (e *apiError) Error() string { return e.err.Error() }

// fail builds an API error: code, reason (details.reason) and message.
func fail(code outpost.Code, reason, msg string) *apiError {
	e := outpost.New(code, "", msg).Detail("reason", reason)
	st, ok := reasonStatus[reason]
	if !ok {
		st = http.StatusInternalServerError
	}
	return &apiError{status: st, err: e}
}

// fromError turns any error into an API error with its status.
func fromError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) {
		return fail(outpost.Process, ReasonInternal, "internal error")
	}
	st := codeStatus[oe.Code]
	if st == 0 {
		st = http.StatusInternalServerError
	}
	reason, _ := oe.Details["reason"].(string)
	switch {
	case reason != "":
		if s, ok := reasonStatus[reason]; ok {
			st = s
		}
	case oe.Code == outpost.Conversation && errors.Is(err, conversation.ErrNotFound):
		reason = ReasonNotFound
	case oe.Code == outpost.Conversation && (errors.Is(err, conversation.ErrInvalid) || errors.Is(err, conversation.ErrAmbiguous) || errors.Is(err, conversation.ErrUnsafe)):
		st, reason = http.StatusBadRequest, ReasonBadRequest
	case oe.Code == outpost.Configuration:
		reason = ReasonBadRequest
	}
	if reason != "" {
		oe.Detail("reason", reason)
	}
	return &apiError{status: st, err: oe}
}

func (e *apiError) write(w http.ResponseWriter) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, ErrorResponse{Error: outpost.ToJSON(e.err)})
}
