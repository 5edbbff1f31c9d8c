package gemini

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Kind names what the fake does with one generateContent or
// streamGenerateContent request.
type Kind string

// Scenario kinds.
const (
	KindText   Kind = "text"   // one text part
	KindCall   Kind = "call"   // optional text, then one functionCall part
	KindEcho   Kind = "echo"   // text "ECHO ncontents=<n> last_user=<text>"
	KindRouter Kind = "router" // the CLI's model router: {"reasoning","model_choice"} as JSON text
	KindError  Kind = "error"  // an HTTP error status with a google.rpc.Status JSON body
	KindHang   Kind = "hang"   // no response until the client or server goes away
	// KindDrop sends the first SSE event of a streamed reply (half the
	// JSON of a plain one), then cuts the connection: a reply that breaks
	// off mid-body.
	KindDrop Kind = "drop"
)

// Usage is the usageMetadata of one reply. Cached is part of Prompt, as in
// the Gemini API; Thoughts are counted apart from Candidates.
type Usage struct {
	Prompt     int `json:"promptTokenCount"`
	Candidates int `json:"candidatesTokenCount"`
	Cached     int `json:"cachedContentTokenCount,omitempty"`
	Thoughts   int `json:"thoughtsTokenCount,omitempty"`
	Total      int `json:"totalTokenCount"`
}

// WithTotal returns u with Total = Prompt + Candidates + Thoughts.
func (u Usage) WithTotal() Usage {
	u.Total = u.Prompt + u.Candidates + u.Thoughts
	return u
}

// DefaultUsage is the usage of a reply when neither Config nor Scenario sets one.
var DefaultUsage = Usage{Prompt: 1200, Candidates: 9, Cached: 1000, Thoughts: 21}.WithTotal()

// Scenario is one scripted reply.
type Scenario struct {
	Kind Kind
	// Name is recorded in Request.Served; "" = string(Kind).
	Name string
	// Text is the reply text (text kind, and the preamble of a call);
	// "" = Config.Text for KindText.
	Text string
	// Call is the functionCall of KindCall: its name and arguments.
	Call string
	Args map[string]any
	// Usage overrides Config.Usage.
	Usage *Usage
	// Chunks splits a streamed text into this many SSE events (0 = 2).
	Chunks int
	// Delay is a pause before the reply starts.
	Delay time.Duration
	// Status, ErrStatus, Message and Details describe a KindError reply:
	// {"error":{"code":Status,"message":Message,"status":ErrStatus,"details":Details}}.
	Status    int
	ErrStatus string
	Message   string
	Details   []map[string]any
	// Header adds response headers.
	Header http.Header
}

// name is the scenario's name in the request log: Name, else its kind.
func (sc Scenario) name() string { return cmp.Or(sc.Name, string(sc.Kind)) }

// named is sc with Name set: the canned scenarios below name themselves
// for the request log (Request.Served).
func (sc Scenario) named(name string) Scenario {
	sc.Name = name
	return sc
}

// Text returns a scenario replying with one text part.
func Text(text string) Scenario { return Scenario{Kind: KindText, Text: text} }

// Call returns a scenario replying with a functionCall of name with args.
func Call(name string, args map[string]any) Scenario {
	return Scenario{Kind: KindCall, Call: name, Args: args}
}

// Shell returns a Call of the CLI's run_shell_command tool.
func Shell(command string) Scenario {
	return Call("run_shell_command", map[string]any{"command": command, "description": "Run a command"})
}

// Echo returns a scenario that shows what the model received.
func Echo() Scenario { return Scenario{Kind: KindEcho} }

// Hang returns a scenario that never answers.
func Hang() Scenario { return Scenario{Kind: KindHang} }

// Drop returns a scenario whose reply breaks off mid-body (KindDrop).
func Drop() Scenario { return Scenario{Kind: KindDrop, Text: "partial reply"} }

// APIError returns an error reply in the Gemini API's shape.
func APIError(status int, errStatus, msg string, details ...map[string]any) Scenario {
	return Scenario{Kind: KindError, Status: status, ErrStatus: errStatus, Message: msg, Details: details}
}

// DailyQuota is the 429 RESOURCE_EXHAUSTED of a spent daily quota: a
// QuotaFailure whose quotaId names a per-day limit, which the CLI treats
// as terminal (no retry).
func DailyQuota() Scenario {
	return APIError(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"You exceeded your current quota, please check your plan and billing details. (fake)",
		map[string]any{
			"@type": "type.googleapis.com/google.rpc.QuotaFailure",
			"violations": []any{map[string]any{
				"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
				"quotaId":     "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
			}},
		}).named("daily_quota")
}

// RateLimit is a plain 429 RESOURCE_EXHAUSTED without details, which the
// CLI retries.
func RateLimit() Scenario {
	return APIError(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).").named("rate_limit")
}

// Unavailable is a 503 UNAVAILABLE (overloaded model).
func Unavailable() Scenario {
	return APIError(http.StatusServiceUnavailable, "UNAVAILABLE", "The model is overloaded. Please try again later.").named("unavailable")
}

// Markers select a scenario from the last user text when no queue entry
// or chooser does.
var Markers = map[string]Scenario{
	"FAKE_TOOL":  Shell("echo tool-ran"),
	"FAKE_QUOTA": DailyQuota(),
	"FAKE_429":   RateLimit(),
	"FAKE_503":   Unavailable(),
	"FAKE_ECHO":  Echo(),
	"FAKE_HANG":  Hang(),
	"FAKE_DROP":  Drop(),
}

// errorBody is the google.rpc.Status JSON of an error reply.
func (sc Scenario) errorBody() []byte {
	e := map[string]any{"code": sc.Status, "message": sc.Message, "status": sc.ErrStatus}
	if len(sc.Details) > 0 {
		e["details"] = sc.Details
	}
	b, err := json.Marshal(map[string]any{"error": e})
	if err != nil {
		panic(fmt.Sprintf("fakeapi/gemini: %v", err))
	}
	return b
}
