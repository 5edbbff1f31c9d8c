package harness

import (
	"context"
	"io"
)

// Permission is an agent's request to use a tool, which the turn's caller
// answers (engine.RunOptions.Permission) when the preset routes its
// agent's requests to it (the ACP presets' permissions=ask).
type Permission struct {
	// Tool is the call: its id, Name its kind ("execute", "edit", …),
	// Input its arguments when the agent gave them.
	Tool  Tool
	Title string
	// Options are the answers the agent offers; the caller picks one by
	// its ID.
	Options []PermissionOption
}

// PermissionOption is one answer an agent offers.
type PermissionOption struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Kind is allow_once, allow_always, reject_once or reject_always.
	Kind string `json:"kind"`
}

// AskFunc answers a permission request: the ID of one of its options, or
// "" (or an error) to cancel the request, which the agent takes as a
// refusal. It may block until a person decides; ctx ends with the turn.
type AskFunc func(ctx context.Context, p Permission) (option string, err error)

// Asking is what the engine gives a live session whose agent asks
// permissions (Asker): the caller's answer, a way to write the reply
// into the agent's input when it comes (whole, between the engine's own
// writes), and a way to report events meanwhile. Begin and End bracket
// a question: while one is open the inactivity watchdog waits.
type Asking struct {
	Ask        AskFunc
	Write      func(func(w io.Writer) error) error
	Emit       func(Event)
	Begin, End func()
}

// Asker is a Live session that can route its agent's permission requests
// to the turn's caller; the engine calls Asking before Begin when the
// caller answers permissions.
type Asker interface {
	Asking(ctx context.Context, a Asking)
}
