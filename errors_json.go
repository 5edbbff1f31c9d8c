package outpost

import "errors"

// ErrorJSON is an error on the wire: the `error` member of the `--json`
// result line and of every error the HTTP API (`outpost serve`) returns
// (docs/events.md, docs/serve.md).
type ErrorJSON struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// ToJSON converts any error to its wire form; nil gives nil. An error that
// is not an *Error gets CodeOf's answer.
func ToJSON(err error) *ErrorJSON {
	if err == nil {
		return nil
	}
	var oe *Error
	if errors.As(err, &oe) {
		return &ErrorJSON{Code: oe.Code, Message: oe.Message(), Details: oe.Details}
	}
	return &ErrorJSON{Code: CodeOf(err), Message: err.Error()}
}
