package claude

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// LiveInput opens a live turn: the command of Request with
// --input-format stream-json and no prompt argument; the prompt and every
// steering message are written to the CLI's standard input as stream-json
// user lines, each with its own uuid.
//
// The CLI answers each uuid'd message with command_lifecycle lines
// (queued, started, then completed or cancelled after the turn that took
// it). A message started while a turn runs was injected into it (the CLI
// appends it to the next tool result: it is seen within the running turn);
// one started after a result runs as a new turn in the same process
// (queued; several queued messages may merge into one turn). Send returns
// its prediction from the state when it writes (a tool call in flight:
// injected, else queued); when the CLI starts the message, Decode reports
// what happened as a notice of kind "steer" with details mode
// ("injected" or "queued"), confirmed true and index (1 for the first
// steering message). Done is true once every message written has
// completed (or was cancelled): the engine then closes standard input and
// the CLI exits. Only valid JSON lines are ever written: a line that is not
// JSON kills the CLI.
func LiveInput(in harness.Input) (harness.Live, error) {
	tc, err := build(in)
	if err != nil {
		return nil, err
	}
	cmd := harness.Command{
		Path:      Program,
		Args:      append(tc.args, "--input-format", "stream-json"),
		Env:       tc.env,
		KeepStdin: true,
	}
	return &live{
		cmd:    cmd,
		prompt: in.Prompt,
		newID:  newUUID,
		dec:    newDecoder(),
		state:  map[string]string{},
		index:  map[string]int{},
		tools:  map[string]bool{},
	}, nil
}

// Lifecycle states of a message the CLI has finished with.
var terminalStates = map[string]bool{"completed": true, "cancelled": true, "canceled": true, "failed": true, "error": true, "discarded": true}

type live struct {
	cmd    harness.Command
	prompt string
	newID  func() (string, error)

	mu        sync.Mutex
	dec       *decoder
	sent      []string          // uuids written, in order; sent[0] is the prompt
	state     map[string]string // uuid -> last lifecycle state
	index     map[string]int    // uuid -> steering index (1-based)
	lifecycle bool              // the CLI reports command_lifecycle
	tools     map[string]bool   // tool calls without a result yet
	results   int
	interrupt int
	// turnPending: a message started a new turn whose result has not
	// arrived (the CLI reports "started" before the turn's init line).
	turnPending bool
}

func (l *live) Command() harness.Command { return l.cmd }

func (l *live) Begin(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.write(w, l.prompt)
	return err
}

// write writes one user line and records its uuid. Callers hold l.mu.
func (l *live) write(w io.Writer, text string) (string, error) {
	id, err := l.newID()
	if err != nil {
		return "", err
	}
	b, err := UserLine(text, id)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(b); err != nil {
		return "", err
	}
	l.sent = append(l.sent, id)
	return id, nil
}

// UserLine is one stream-json user message line (with its newline): the
// only kind of line, with control requests, outpost writes to the CLI.
// encoding/json escapes every newline and invalid UTF-8, so it is always
// exactly one valid JSON line.
func UserLine(text, uuid string) ([]byte, error) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, err := json.Marshal(struct {
		Type            string  `json:"type"`
		Message         message `json:"message"`
		UUID            string  `json:"uuid,omitempty"`
		SessionID       string  `json:"session_id"`
		ParentToolUseID *string `json:"parent_tool_use_id"`
	}{Type: "user", Message: message{Role: "user", Content: text}, UUID: uuid})
	if err != nil {
		return nil, fmt.Errorf("claude: encoding a user message: %w", err)
	}
	return append(b, '\n'), nil
}

func (l *live) Send(w io.Writer, text string) (harness.Steer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mode := harness.SteerQueued
	if len(l.tools) > 0 {
		mode = harness.SteerInjected
	}
	id, err := l.write(w, text)
	if err != nil {
		return mode, err
	}
	l.index[id] = len(l.sent) - 1
	return mode, nil
}

func (l *live) Interrupt(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.interrupt++
	b, err := json.Marshal(map[string]any{
		"type":       "control_request",
		"request_id": "outpost-interrupt-" + strconv.Itoa(l.interrupt),
		"request":    map[string]string{"subtype": "interrupt"},
	})
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return err
	}
	l.dec.interrupting = true
	return nil
}

func (l *live) Decode(line []byte, _ io.Writer) []harness.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return kit.Guard(line, "claude", "output line", func() []harness.Event { return l.decode(line) })
}

// decode is Decode under l.mu.
func (l *live) decode(line []byte) []harness.Event {
	o := parseObj(line)
	if o == nil {
		return nil
	}
	if o.Str("type") == "command_lifecycle" {
		return l.lifecycleLine(o)
	}
	evs := l.dec.decodeObj(o)
	for _, ev := range evs {
		switch ev.Type {
		case harness.EventToolCall:
			if ev.Tool != nil && ev.Tool.ID != "" && len(l.tools) < maxBlocksTracked {
				l.tools[ev.Tool.ID] = true
			}
		case harness.EventToolResult:
			if ev.Tool != nil {
				delete(l.tools, ev.Tool.ID)
			}
		}
	}
	if o.Str("type") == "result" {
		l.results++
		l.turnPending = false
		clear(l.tools)
	}
	return evs
}

func (l *live) lifecycleLine(o obj) []harness.Event {
	id, state := o.Str("command_uuid"), o.Str("state")
	if id == "" || state == "" {
		return nil
	}
	l.lifecycle = true
	if _, ours := l.index[id]; !ours && (len(l.sent) == 0 || l.sent[0] != id) {
		return nil
	}
	prev := l.state[id]
	l.state[id] = state
	if state != "started" || prev == "started" {
		return nil
	}
	if !l.dec.running {
		l.turnPending = true
	}
	n, steer := l.index[id]
	if !steer {
		return nil
	}
	mode, text := harness.SteerQueued, fmt.Sprintf("steering message %d started as a new turn", n)
	if l.dec.running {
		mode, text = harness.SteerInjected, fmt.Sprintf("steering message %d was injected into the running turn", n)
	}
	return []harness.Event{{Type: harness.EventNotice, Kind: "steer", Text: text, Details: map[string]any{"mode": string(mode), "confirmed": true, "index": n}}}
}

// Done reports that the CLI is idle with nothing left to do: a result has
// arrived, no turn runs or is about to start, and every message written
// was taken into a turn. (The CLI still runs every message already written
// when its standard input closes; closing early would only refuse later
// steering.)
func (l *live) Done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.results == 0 || l.dec.running || l.turnPending {
		return false
	}
	if !l.lifecycle {
		// A CLI that does not report lifecycles: after a result is as good
		// as it gets.
		return true
	}
	for _, id := range l.sent {
		if s := l.state[id]; s != "started" && !terminalStates[s] {
			return false
		}
	}
	return true
}

// newUUID returns a random (version 4) UUID.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("claude: random uuid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}
