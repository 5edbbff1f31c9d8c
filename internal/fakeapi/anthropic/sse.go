package anthropic

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Event is one server-sent event: "event: <Name>" and its "data:" JSON.
type Event struct {
	Name string
	Data json.RawMessage
}

// Type returns the "type" field of the event's data.
func (e Event) Type() string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(e.Data, &v)
	return v.Type
}

// WriteEvent writes one SSE event in the Anthropic wire format:
// "event: <name>\ndata: <json>\n\n". data is marshalled unless it is a
// json.RawMessage or []byte.
func WriteEvent(w io.Writer, name string, data any) error {
	var b []byte
	switch v := data.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}

// ParseSSE reads a whole SSE stream. Multiple data lines of one event are
// joined with "\n"; comment lines (":…") and unknown fields are ignored; an
// event without data is skipped.
func ParseSSE(r io.Reader) ([]Event, error) {
	var (
		events []Event
		name   string
		data   []string
	)
	flush := func() {
		if len(data) > 0 {
			if name == "" {
				name = "message"
			}
			events = append(events, Event{Name: name, Data: json.RawMessage(strings.Join(data, "\n"))})
		}
		name, data = "", nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			flush()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	flush()
	return events, sc.Err()
}

// AssembledMessage is the message an SSE stream describes, put back together
// the way a client does (see Assemble).
type AssembledMessage struct {
	ID         string
	Model      string
	StopReason string
	Usage      Usage // message_start input tokens, message_delta output tokens
	Content    []AssembledBlock
	Error      *APIErrorBody // set when the stream carried an "error" event
	Stopped    bool          // message_stop seen
}

// AssembledBlock is one content block of an AssembledMessage.
type AssembledBlock struct {
	Type      string          // text, thinking, tool_use
	Text      string          // text
	Thinking  string          // thinking
	Signature string          // thinking signature
	ID, Name  string          // tool_use
	Input     json.RawMessage // tool_use: the concatenated input_json_delta
}

// APIErrorBody is the "error" object of an Anthropic error response or event.
type APIErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Assemble folds a sequence of Messages API stream events into the message.
func Assemble(events []Event) (AssembledMessage, error) {
	var m AssembledMessage
	for _, ev := range events {
		var d struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID    string `json:"id"`
				Model string `json:"model"`
				Usage Usage  `json:"usage"`
			} `json:"message"`
			ContentBlock struct {
				Type string `json:"type"`
				Text string `json:"text"`
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				Signature   string `json:"signature"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *Usage        `json:"usage"`
			Error *APIErrorBody `json:"error"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return m, fmt.Errorf("event %q: %w", ev.Name, err)
		}
		if d.Type != ev.Name {
			return m, fmt.Errorf("event name %q but data type %q", ev.Name, d.Type)
		}
		block := func() (*AssembledBlock, error) {
			if d.Index < 0 || d.Index >= len(m.Content) {
				return nil, fmt.Errorf("%s: index %d out of range", d.Type, d.Index)
			}
			return &m.Content[d.Index], nil
		}
		switch d.Type {
		case "message_start":
			m.ID, m.Model = d.Message.ID, d.Message.Model
			m.Usage = d.Message.Usage
		case "content_block_start":
			if d.Index != len(m.Content) {
				return m, fmt.Errorf("content_block_start index %d, want %d", d.Index, len(m.Content))
			}
			m.Content = append(m.Content, AssembledBlock{Type: d.ContentBlock.Type, Text: d.ContentBlock.Text,
				ID: d.ContentBlock.ID, Name: d.ContentBlock.Name})
		case "content_block_delta":
			b, err := block()
			if err != nil {
				return m, err
			}
			switch d.Delta.Type {
			case "text_delta":
				b.Text += d.Delta.Text
			case "thinking_delta":
				b.Thinking += d.Delta.Thinking
			case "signature_delta":
				b.Signature += d.Delta.Signature
			case "input_json_delta":
				b.Input = append(b.Input, d.Delta.PartialJSON...)
			default:
				return m, fmt.Errorf("unknown delta type %q", d.Delta.Type)
			}
		case "content_block_stop":
			if _, err := block(); err != nil {
				return m, err
			}
		case "message_delta":
			m.StopReason = d.Delta.StopReason
			if d.Usage != nil {
				m.Usage.OutputTokens = d.Usage.OutputTokens
			}
		case "message_stop":
			m.Stopped = true
		case "error":
			m.Error = d.Error
		case "ping":
		}
	}
	return m, nil
}
