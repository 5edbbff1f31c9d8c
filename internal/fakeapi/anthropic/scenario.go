package anthropic

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind names what the fake does with one POST /v1/messages request.
type Kind string

// Scenario kinds.
const (
	KindText        Kind = "text"         // one text block
	KindThinking    Kind = "thinking"     // a thinking block, then a text block
	KindToolUse     Kind = "tool_use"     // optional text block, then one tool_use block (stop_reason tool_use)
	KindEcho        Kind = "echo"         // text "ECHO nmsg=<n> last_user=<text>"
	KindSlow        Kind = "slow"         // text streamed word by word with Scenario.Delay between deltas
	KindStall       Kind = "stall"        // 200 + headers + message_start, then nothing until the client or server goes away
	KindHang        Kind = "hang"         // no response at all (not even headers) until the client or server goes away
	KindError       Kind = "error"        // an HTTP error status with an Anthropic JSON error body
	KindStreamError Kind = "stream_error" // 200 + message_start, then an SSE "event: error" (overloaded_error)
)

// Usage is the token usage the fake reports for one API message.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// ToolCall is the tool_use block of a KindToolUse scenario.
type ToolCall struct {
	ID    string          // "" = "toolu_fake_<request seq>"
	Name  string          // e.g. "Bash"
	Input json.RawMessage // JSON object; nil = {}
}

// Scenario is one scripted reply. Build it with the constructors below or by hand.
type Scenario struct {
	Kind Kind
	// Name is recorded in Request.Scenario; "" = string(Kind).
	Name string

	// Text is the reply text for text, thinking, slow and (as a preamble) tool_use.
	// "" = Options.Text for text/thinking/slow, no preamble for tool_use.
	Text string
	// Thinking is the thinking text of KindThinking ("" = a default).
	Thinking string
	// Tool is the tool call of KindToolUse.
	Tool *ToolCall
	// Usage overrides Options.Usage for this reply.
	Usage *Usage
	// StopReason overrides the stop reason (default end_turn, tool_use for KindToolUse).
	StopReason string

	// Delay: for KindSlow the pause before each text delta (0 = Options.SlowDelay);
	// for the other kinds a pause before the response starts.
	Delay time.Duration

	// Status, ErrorType and ErrorMessage describe a KindError reply; Header adds
	// response headers (any kind).
	Status       int
	ErrorType    string
	ErrorMessage string
	Header       http.Header
}

// name is the scenario's name in the request log: Name, else its kind.
func (sc Scenario) name() string { return cmp.Or(sc.Name, string(sc.Kind)) }

// named is sc with Name set: the canned scenarios below name themselves
// for the request log (Request.Scenario) and for ScenarioByName.
func (sc Scenario) named(name string) Scenario {
	sc.Name = name
	return sc
}

// Text returns a scenario replying with one text block.
func Text(text string) Scenario { return Scenario{Kind: KindText, Text: text} }

// Thinking returns a scenario replying with a thinking block and then a text block.
func Thinking(thinking, text string) Scenario {
	return Scenario{Kind: KindThinking, Thinking: thinking, Text: text}
}

// ToolUse returns a scenario replying with a tool_use block calling name with
// input (marshalled to JSON; a json.RawMessage or []byte is used as is).
func ToolUse(name string, input any) Scenario {
	var raw json.RawMessage
	switch v := input.(type) {
	case nil:
		raw = json.RawMessage(`{}`)
	case json.RawMessage:
		raw = v
	case []byte:
		raw = json.RawMessage(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("anthropic.ToolUse: marshal input: %v", err))
		}
		raw = b
	}
	return Scenario{Kind: KindToolUse, Tool: &ToolCall{Name: name, Input: raw}}
}

// StructuredOutputTool is the name of the tool Claude Code offers the model
// when it runs with --json-schema: the model answers by calling it with the
// value as its input.
const StructuredOutputTool = "StructuredOutput"

// StructuredOutput returns a ToolUse scenario answering with value through
// Claude Code's StructuredOutput tool (--json-schema).
func StructuredOutput(value any) Scenario {
	return ToolUse(StructuredOutputTool, value).named("structured")
}

// Bash returns a ToolUse scenario calling Claude Code's Bash tool with command.
func Bash(command string) Scenario {
	return ToolUse("Bash", map[string]string{"command": command, "description": "Run a command"})
}

// Echo returns a scenario replying "ECHO nmsg=<n> last_user=<text>", which shows
// what the model received (number of messages, last user text).
func Echo() Scenario { return Scenario{Kind: KindEcho} }

// Slow returns a scenario streaming text one word per delta with delay before each.
func Slow(text string, delay time.Duration) Scenario {
	return Scenario{Kind: KindSlow, Text: text, Delay: delay}
}

// Stall returns a scenario that sends the headers and message_start, then nothing.
func Stall() Scenario { return Scenario{Kind: KindStall} }

// Hang returns a scenario that never sends response headers.
func Hang() Scenario { return Scenario{Kind: KindHang} }

// StreamError returns a scenario sending message_start and then an SSE error event.
func StreamError() Scenario { return Scenario{Kind: KindStreamError} }

// APIError returns a scenario answering with an HTTP error status and an
// Anthropic error body {"type":"error","error":{"type":errType,"message":msg}}.
func APIError(status int, errType, msg string) Scenario {
	return Scenario{Kind: KindError, Status: status, ErrorType: errType, ErrorMessage: msg}
}

// RateLimit returns a plain per-minute 429 rate_limit_error (retry-after: 1).
func RateLimit() Scenario {
	sc := APIError(http.StatusTooManyRequests, "rate_limit_error",
		"Number of request tokens has exceeded your per-minute rate limit (fake)").named("rate_limit")
	sc.Header = http.Header{"Retry-After": {"1"}}
	return sc
}

// UsageLimit returns the 429 a subscription (OAuth) account gets when its
// five-hour limit is used up: rate_limit_error with the
// anthropic-ratelimit-unified-* headers, resetting at resetsAt. Authenticated
// with an API key the CLI shows the body's message; with OAuth it shows
// "You've hit your 5-hour limit · resets <time>".
func UsageLimit(resetsAt time.Time) Scenario {
	sc := APIError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed your account's rate limit. Please try again later.").named("usage_limit")
	sc.Header = UsageLimitHeaders(resetsAt)
	return sc
}

// UsageLimitHeaders returns the anthropic-ratelimit-unified-* headers of a
// rejected five-hour window resetting at resetsAt (weekly window allowed).
func UsageLimitHeaders(resetsAt time.Time) http.Header {
	reset := strconv.FormatInt(resetsAt.Unix(), 10)
	weekly := strconv.FormatInt(resetsAt.Add(5*24*time.Hour).Unix(), 10)
	retry := int(time.Until(resetsAt).Seconds())
	if retry < 1 {
		retry = 1
	}
	h := http.Header{}
	h.Set("anthropic-ratelimit-unified-status", "rejected")
	h.Set("anthropic-ratelimit-unified-reset", reset)
	h.Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
	h.Set("anthropic-ratelimit-unified-fallback-percentage", "0.5")
	h.Set("anthropic-ratelimit-unified-5h-status", "rejected")
	h.Set("anthropic-ratelimit-unified-5h-reset", reset)
	h.Set("anthropic-ratelimit-unified-5h-utilization", "1.0")
	h.Set("anthropic-ratelimit-unified-7d-status", "allowed")
	h.Set("anthropic-ratelimit-unified-7d-reset", weekly)
	h.Set("anthropic-ratelimit-unified-7d-utilization", "0.42")
	h.Set("anthropic-ratelimit-unified-overage-status", "rejected")
	h.Set("anthropic-ratelimit-unified-overage-disabled-reason", "org_level_disabled")
	h.Set("Retry-After", strconv.Itoa(retry))
	return h
}

// Overloaded returns a 529 overloaded_error.
func Overloaded() Scenario {
	return APIError(529, "overloaded_error", "Overloaded").named("overloaded")
}

// ServerError returns a 500 api_error.
func ServerError() Scenario {
	return APIError(http.StatusInternalServerError, "api_error", "Internal server error").named("server_error")
}

// Unauthorized returns a 401 authentication_error.
func Unauthorized() Scenario {
	return APIError(http.StatusUnauthorized, "authentication_error", "invalid x-api-key").named("unauthorized")
}

// Forbidden returns a 403 permission_error.
func Forbidden() Scenario {
	return APIError(http.StatusForbidden, "permission_error",
		"Your API key does not have permission to use the specified resource.").named("forbidden")
}

// BadRequest returns a 400 invalid_request_error with msg.
func BadRequest(msg string) Scenario {
	return APIError(http.StatusBadRequest, "invalid_request_error", msg).named("bad_request")
}

// Marker is the text that selects a scenario when it appears in the last user
// message (see MarkerScenario): "FAKE_" + upper-case scenario name.
func Marker(name string) string { return "FAKE_" + strings.ToUpper(name) }

// ScenarioNames lists the names accepted by ScenarioByName.
func ScenarioNames() []string {
	return slices.Sorted(maps.Keys(byName))
}

var byName = map[string]func(o *Options) Scenario{
	"text":  func(o *Options) Scenario { return Text("") },
	"think": func(o *Options) Scenario { return Thinking("", "") },
	"tool": func(o *Options) Scenario {
		sc := Bash(o.ToolCommand)
		sc.Text = "Running it."
		return sc
	},
	"echo": func(o *Options) Scenario { return Echo() },
	"structured": func(o *Options) Scenario {
		if json.Valid([]byte(o.Text)) {
			return StructuredOutput(json.RawMessage(o.Text))
		}
		return StructuredOutput(nil)
	},
	"slow":         func(o *Options) Scenario { return Slow("", 0) },
	"stall":        func(o *Options) Scenario { return Stall() },
	"hang":         func(o *Options) Scenario { return Hang() },
	"stream_error": func(o *Options) Scenario { return StreamError() },
	"429":          func(o *Options) Scenario { return RateLimit() },
	"usage_limit": func(o *Options) Scenario {
		r := o.ResetsAt
		if r.IsZero() {
			r = time.Now().Add(2 * time.Hour).Truncate(time.Minute)
		}
		return UsageLimit(r)
	},
	"529": func(o *Options) Scenario { return Overloaded() },
	"500": func(o *Options) Scenario { return ServerError() },
	"401": func(o *Options) Scenario { return Unauthorized() },
	"403": func(o *Options) Scenario { return Forbidden() },
	"400": func(o *Options) Scenario { return BadRequest("messages: fake bad request") },
}

// markerOrder is the order in which markers are looked for: longer names first
// so that e.g. FAKE_STREAM_ERROR is not taken for something shorter.
var markerOrder = func() []string {
	names := ScenarioNames()
	sort.SliceStable(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	return names
}()

// ScenarioByName returns the scenario called name (one of ScenarioNames: text,
// think, tool, echo, slow, stall, hang, stream_error, 429, usage_limit, 529,
// 500, 401, 403, 400), configured from opts (nil = defaults).
func ScenarioByName(name string, opts *Options) (Scenario, bool) {
	f, ok := byName[strings.ToLower(name)]
	if !ok {
		return Scenario{}, false
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.setDefaults()
	sc := f(&o)
	if sc.Name == "" {
		sc.Name = strings.ToLower(name)
	}
	return sc, true
}

// MarkerScenario looks for a marker (FAKE_TOOL, FAKE_THINK, FAKE_429, …; see
// Marker and ScenarioNames) in text and returns its scenario. "FAKE_TOOL:<cmd>"
// runs <cmd> (up to the end of the line) with the Bash tool instead of
// opts.ToolCommand.
func MarkerScenario(text string, opts *Options) (Scenario, bool) {
	for _, name := range markerOrder {
		m := Marker(name)
		i := strings.Index(text, m)
		if i < 0 {
			continue
		}
		sc, _ := ScenarioByName(name, opts)
		if name == "tool" {
			rest := text[i+len(m):]
			if strings.HasPrefix(rest, ":") {
				cmd := rest[1:]
				if j := strings.IndexByte(cmd, '\n'); j >= 0 {
					cmd = cmd[:j]
				}
				if cmd = strings.TrimSpace(cmd); cmd != "" {
					text := sc.Text
					sc = Bash(cmd)
					sc.Text = text
					sc.Name = "tool"
				}
			}
		}
		return sc, true
	}
	return Scenario{}, false
}
