package engine

import (
	"github.com/outposthq/outpost"
)

// ResultLine is a finished turn on the wire: the last line of `outpost run
// --json` and the last event of a turn's stream in the HTTP API (`outpost
// serve`), documented in docs/events.md. Events before it are
// harness.Event values; one decoder reads both.
type ResultLine struct {
	Type string `json:"type"` // "result"
	// Result is the turn's Result, every field of it on the line under
	// its own name: one definition of a turn's outcome, in Go and on the
	// wire. For an error before the turn began it is empty but for what
	// the caller knew (the CLI's own times, the agent's name).
	Result
	// ExitCode is the exit status `outpost run` exits with for this turn
	// (docs/errors.md).
	ExitCode int                `json:"exit_code"`
	Error    *outpost.ErrorJSON `json:"error"`
}

// NewResultLine is the wire form of what Run returned. res may be nil.
func NewResultLine(res *Result, err error) ResultLine {
	line := ResultLine{Type: "result", ExitCode: outpost.ExitCode(err), Error: outpost.ToJSON(err)}
	if res != nil {
		line.Result = *res
	}
	return line
}
