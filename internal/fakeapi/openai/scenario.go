package openai

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Kind is what the fake does with a request.
type Kind string

const (
	// KindText streams a text reply (Scenario.Text) and completes with Scenario.Usage.
	KindText Kind = "text"
	// KindReasoning streams a reasoning summary (Scenario.Reasoning) and then the text.
	// Chat Completions has no reasoning items: it answers as KindText.
	KindReasoning Kind = "reasoning"
	// KindToolCall calls the shell tool the client offered with Scenario.Command: Responses
	// exec_command {"cmd"} (or shell / shell_command / local_shell), Chat bash {"command"}.
	KindToolCall Kind = "tool_call"
	// KindApplyPatch calls the custom tool apply_patch with Scenario.Patch (Responses). On
	// Chat it answers as KindText.
	KindApplyPatch Kind = "apply_patch"
	// KindEcho replies "ECHO nmsg=<NumInput> last_user=<LastUserText>".
	KindEcho Kind = "echo"
	// KindSlow streams Scenario.Chunks text deltas, each after Scenario.Delay.
	KindSlow Kind = "slow"
	// KindHTTPError answers Scenario.Status with Scenario.Body (and Retry-After).
	KindHTTPError Kind = "http_error"
	// KindDrop starts a stream (headers and a first delta) and then aborts the connection.
	KindDrop Kind = "drop"
	// KindTruncate starts a stream (headers and a first delta) and ends it cleanly, without
	// response.completed (Chat: without finish_reason and [DONE]).
	KindTruncate Kind = "truncate"
	// KindFailed streams a Responses "response.failed" event with Scenario.ErrorCode and
	// Scenario.ErrorMessage. On Chat it sends an error object inside the stream.
	KindFailed Kind = "failed"
	// KindHang sends nothing, not even headers, until the client goes away or Close.
	KindHang Kind = "hang"
	// KindStall sends headers and response.created (Chat: a role chunk), then nothing.
	KindStall Kind = "stall"
	// KindDisconnect closes the connection without any HTTP response.
	KindDisconnect Kind = "disconnect"
)

// Scenario is a scripted reply. Empty fields take the server defaults (Config).
type Scenario struct {
	Kind      Kind
	Text      string // reply text (KindText, KindReasoning; first word of KindDrop/KindTruncate)
	Reasoning string // reasoning summary (KindReasoning)
	Usage     *Usage
	// Command is the shell command of KindToolCall. ToolName and Arguments, when set,
	// replace the tool name and the raw JSON arguments chosen from the request.
	Command   string
	ToolName  string
	Arguments string
	Patch     string // apply_patch input (KindApplyPatch)
	// Status, Body, RetryAfter and Header make the reply of KindHTTPError.
	Status     int
	Body       string
	RetryAfter string
	Header     http.Header
	// Delay and Chunks shape KindSlow (per-delta pause and number of deltas).
	Delay  time.Duration
	Chunks int
	// ErrorCode and ErrorMessage fill response.failed (KindFailed).
	ErrorCode    string
	ErrorMessage string
}

// WithUsage returns a copy with the usage set.
func (s Scenario) WithUsage(u Usage) Scenario { s.Usage = &u; return s }

// WithRetryAfter returns a copy that sends a Retry-After header (KindHTTPError).
func (s Scenario) WithRetryAfter(v string) Scenario { s.RetryAfter = v; return s }

// Error bodies, shaped like the OpenAI API's.
const (
	BodyRateLimit         = `{"error":{"message":"Rate limit reached for requests. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	BodyUsageLimit        = `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","code":"usage_limit_reached"}}`
	BodyInsufficientQuota = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	Body500               = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	Body503               = `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","param":null,"code":null}}`
	Body401               = `{"error":{"message":"Incorrect API key provided: sk-fake. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
)

// Text replies with text (empty: the server default).
func Text(text string) Scenario { return Scenario{Kind: KindText, Text: text} }

// Reasoning replies with a reasoning summary and then text (empty: defaults).
func Reasoning(summary, text string) Scenario {
	return Scenario{Kind: KindReasoning, Reasoning: summary, Text: text}
}

// ToolCall calls the client's shell tool with command (empty: the server default).
func ToolCall(command string) Scenario { return Scenario{Kind: KindToolCall, Command: command} }

// CallTool calls the named tool with the raw JSON arguments args, whether
// or not the client offered it (Qwen Code's structured_output tool).
func CallTool(name, args string) Scenario {
	return Scenario{Kind: KindToolCall, ToolName: name, Arguments: args}
}

// StructuredAnswer is the answer of the FAKE_STRUCTURED marker.
const StructuredAnswer = `{"name":"Ada Lovelace","age":36}`

// ApplyPatch calls the custom tool apply_patch with patch (empty: the server default).
func ApplyPatch(patch string) Scenario { return Scenario{Kind: KindApplyPatch, Patch: patch} }

// Echo replies "ECHO nmsg=<n> last_user=<text>".
func Echo() Scenario { return Scenario{Kind: KindEcho} }

// Slow streams chunks deltas with delay before each (zero: server defaults).
func Slow(chunks int, delay time.Duration) Scenario {
	return Scenario{Kind: KindSlow, Chunks: chunks, Delay: delay}
}

// HTTPError answers status with body.
func HTTPError(status int, body string) Scenario {
	return Scenario{Kind: KindHTTPError, Status: status, Body: body}
}

// RateLimited is 429 rate_limit_exceeded with no Retry-After.
func RateLimited() Scenario { return HTTPError(http.StatusTooManyRequests, BodyRateLimit) }

// UsageLimitReached is 429 with error.type usage_limit_reached (ChatGPT plan limit).
func UsageLimitReached() Scenario { return HTTPError(http.StatusTooManyRequests, BodyUsageLimit) }

// InsufficientQuota is 429 with error.code insufficient_quota (API billing quota).
func InsufficientQuota() Scenario {
	return HTTPError(http.StatusTooManyRequests, BodyInsufficientQuota)
}

// ServerError is 500.
func ServerError() Scenario { return HTTPError(http.StatusInternalServerError, Body500) }

// Unavailable is 503.
func Unavailable() Scenario { return HTTPError(http.StatusServiceUnavailable, Body503) }

// Unauthorized is 401 invalid_api_key.
func Unauthorized() Scenario { return HTTPError(http.StatusUnauthorized, Body401) }

// Drop starts the stream and aborts the connection before it completes.
func Drop() Scenario { return Scenario{Kind: KindDrop} }

// Truncate ends the stream cleanly before it completes.
func Truncate() Scenario { return Scenario{Kind: KindTruncate} }

// Failed sends response.failed with code and message (empty: server_error, "fake failure").
func Failed(code, message string) Scenario {
	return Scenario{Kind: KindFailed, ErrorCode: code, ErrorMessage: message}
}

// Hang never answers, not even headers, until the client goes away or the server closes.
func Hang() Scenario { return Scenario{Kind: KindHang} }

// Stall sends headers and the start of a stream, then nothing (an idle stream).
func Stall() Scenario { return Scenario{Kind: KindStall} }

// Disconnect closes the connection without an HTTP response.
func Disconnect() Scenario { return Scenario{Kind: KindDisconnect} }

// Markers looked for in the last user text by DefaultChoice, in this order (the first
// one present wins). FAKE_429 is rate_limit_exceeded; FAKE_FAILED_CONTEXT is
// response.failed with code context_length_exceeded.
var Markers = []struct {
	Marker   string
	Scenario Scenario
}{
	{"FAKE_USAGE_LIMIT", UsageLimitReached()},
	{"FAKE_QUOTA", InsufficientQuota()},
	{"FAKE_429_RETRY", RateLimited().WithRetryAfter("1")},
	{"FAKE_429", RateLimited()},
	{"FAKE_500", ServerError()},
	{"FAKE_503", Unavailable()},
	{"FAKE_401", Unauthorized()},
	{"FAKE_DROP", Drop()},
	{"FAKE_TRUNCATE", Truncate()},
	{"FAKE_FAILED_CONTEXT", Failed("context_length_exceeded", "Your input exceeds the context window of this model. Please adjust your input and try again.")},
	{"FAKE_FAILED", Failed("", "")},
	{"FAKE_HANG", Hang()},
	{"FAKE_STALL", Stall()},
	{"FAKE_DISCONNECT", Disconnect()},
	{"FAKE_SLOW", Slow(0, 0)},
	{"FAKE_PATCH", ApplyPatch("")},
	{"FAKE_STRUCTURED", CallTool("structured_output", StructuredAnswer)},
	{"FAKE_TOOL", ToolCall("")},
	{"FAKE_REASONING", Reasoning("", "")},
	{"FAKE_ECHO", Echo()},
}

// ScenarioForText returns the scenario of the first marker present in text.
func ScenarioForText(text string) (Scenario, bool) {
	for _, m := range Markers {
		if strings.Contains(text, m.Marker) {
			return m.Scenario, true
		}
	}
	return Scenario{}, false
}

// EchoText is the reply of KindEcho.
func EchoText(req *Request) string {
	return "ECHO nmsg=" + strconv.Itoa(req.NumInput) + " last_user=" + req.LastUserText
}
