package anthropic

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
)

// Request is one HTTP request the fake received, recorded for assertions.
// Credentials are recorded as sent (the fake only ever sees fake keys).
type Request struct {
	Seq      int       // 1-based arrival order over all paths
	Time     time.Time // arrival time
	Method   string
	Path     string // URL path, e.g. "/v1/messages"
	RawQuery string // e.g. "beta=true"
	Header   http.Header
	Body     []byte         // raw body
	JSON     map[string]any // decoded body when it is a JSON object, else nil

	// APIKey is the x-api-key header, Authorization the authorization header.
	APIKey        string
	Authorization string

	// For POST /v1/messages:
	Model         string
	Stream        bool
	MaxTokens     int
	NumMessages   int       // len(messages)
	Messages      []Message // the messages, flattened to text
	LastUserText  string    // text of the last role:"user" message (see Message.Text)
	HasToolResult bool      // the last user message carries a tool_result block
	// Tools are the names of the tools the request offers the model, in
	// order (Claude Code offers StructuredOutput with --json-schema).
	Tools    []string
	Scenario string // name of the scenario served ("" for other paths)
	// Ended is how the reply to a Messages request ended: fakeapi's
	// EndFinished, EndClientGone or EndScenario; "" while it is being written.
	Ended string
}

// IsMessages reports whether r is a POST to the Messages API.
func (r Request) IsMessages() bool {
	return r.Method == http.MethodPost && r.Path == "/v1/messages"
}

// Message is one entry of the request's messages array, flattened.
type Message struct {
	Role string
	// Text joins the message's blocks with "\n": text blocks as is, except those
	// that start with "<system-reminder>" (Claude Code's injected context);
	// tool_result blocks as "[tool_result] <content text>"; tool_use blocks as
	// "[tool_use <name>] <input JSON>"; thinking blocks are left out. If that
	// leaves nothing, Text is the joined text blocks including system reminders.
	Text string
	// Blocks lists the block types in order ("text", "tool_result", …); a
	// string content is one "text" block.
	Blocks []string
}

func parseMessages(body map[string]any) []Message {
	raw, _ := body["messages"].([]any)
	out := make([]Message, 0, len(raw))
	for _, m := range raw {
		mm, _ := m.(map[string]any)
		if mm == nil {
			continue
		}
		role, _ := mm["role"].(string)
		msg := Message{Role: role}
		var parts, reminders []string
		switch c := mm["content"].(type) {
		case string:
			msg.Blocks = []string{"text"}
			if strings.HasPrefix(strings.TrimSpace(c), "<system-reminder>") {
				reminders = append(reminders, c)
			} else {
				parts = append(parts, c)
			}
		case []any:
			for _, b := range c {
				bm, _ := b.(map[string]any)
				if bm == nil {
					continue
				}
				typ, _ := bm["type"].(string)
				msg.Blocks = append(msg.Blocks, typ)
				switch typ {
				case "text":
					t, _ := bm["text"].(string)
					if strings.HasPrefix(strings.TrimSpace(t), "<system-reminder>") {
						reminders = append(reminders, t)
					} else {
						parts = append(parts, t)
					}
				case "tool_result":
					parts = append(parts, "[tool_result] "+fakeapi.ContentText(bm["content"]))
				case "tool_use":
					name, _ := bm["name"].(string)
					in, _ := json.Marshal(bm["input"])
					parts = append(parts, "[tool_use "+name+"] "+string(in))
				}
			}
		}
		if len(parts) == 0 {
			parts = reminders
		}
		msg.Text = strings.Join(parts, "\n")
		out = append(out, msg)
	}
	return out
}

func (r *Request) fillMessages() {
	if r.JSON == nil {
		return
	}
	r.Model, _ = r.JSON["model"].(string)
	r.Stream, _ = r.JSON["stream"].(bool)
	if mt, ok := r.JSON["max_tokens"].(float64); ok {
		r.MaxTokens = int(mt)
	}
	r.Messages = parseMessages(r.JSON)
	if tools, ok := r.JSON["tools"].([]any); ok {
		for _, t := range tools {
			if tm, ok := t.(map[string]any); ok {
				if n, ok := tm["name"].(string); ok {
					r.Tools = append(r.Tools, n)
				}
			}
		}
	}
	r.NumMessages = len(r.Messages)
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			r.LastUserText = r.Messages[i].Text
			for _, b := range r.Messages[i].Blocks {
				if b == "tool_result" {
					r.HasToolResult = true
				}
			}
			break
		}
	}
}

// UserTexts returns the Text of every role:"user" message, in order.
func (r Request) UserTexts() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Text)
		}
	}
	return out
}

// HasTool reports whether the request offers the tool name.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// ToolSchema returns the input schema of the offered tool name, re-encoded
// (for StructuredOutput: the --json-schema the CLI was given), or nil.
func (r Request) ToolSchema(name string) []byte {
	tools, _ := r.JSON["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		if n, _ := tm["name"].(string); n == name && tm["input_schema"] != nil {
			b, _ := json.Marshal(tm["input_schema"])
			return b
		}
	}
	return nil
}

func (r Request) clone() Request {
	c := r
	c.Header = r.Header.Clone()
	c.Body = append([]byte(nil), r.Body...)
	c.Messages = append([]Message(nil), r.Messages...)
	c.Tools = append([]string(nil), r.Tools...)
	// JSON is shared read-only: it is never modified after recording.
	return c
}
