package meter

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/harness"
)

// chunked reads at most n bytes per Read, to split events and lines.
type chunked struct {
	r io.Reader
	n int
}

func (c chunked) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// meterOf runs one response through a meter: After, then the body read
// in chunks of n bytes, to its end when full, else cut after cut bytes
// and closed.
func meterOf(api, contentType, body string, n, cut int) harness.Metered {
	m := New(Options{APIs: []string{api}})
	var r io.Reader = strings.NewReader(body)
	if cut >= 0 { // the upstream is gone after cut: nothing more to read
		r = io.MultiReader(strings.NewReader(body[:cut]), iotest.ErrReader(io.ErrUnexpectedEOF))
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}},
		Body: io.NopCloser(chunked{r, max(n, 1)})}
	m.After(resp, 0)
	if cut < 0 {
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
	} else {
		io.CopyN(io.Discard, resp.Body, int64(cut)) //nolint:errcheck
	}
	resp.Body.Close()
	m.Settle(time.Minute)
	return m.Metered()
}

const (
	sse    = "text/event-stream"
	ctJSON = "application/json"
)

const anthropicSSE = "event: message_start\r\n" +
	`data: {"type":"message_start","message":{"id":"m","model":"claude-x","usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\r\n\r\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"message usage model"}}` + "\n\n" +
	": a comment\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":321}}` + "\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

const responsesSSE = `data: {"type":"response.created","response":{"model":"gpt-x","usage":null}}` + "\n\n" +
	`data: {"type":"response.output_text.delta","delta":"hi"}` + "\n\n" +
	`data: {"type":"response.completed","response":{"model":"gpt-x","usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":600},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":40}}}}` + "\n\n"

const chatSSE = `data: {"model":"gpt-c","choices":[{"delta":{"content":"hi"}}],"usage":null}` + "\n\n" +
	`data: {"model":"gpt-c","choices":[],"usage":{"prompt_tokens":70,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":7},"completion_tokens_details":{"reasoning_tokens":2}}}` + "\n\n" +
	"data: [DONE]\n\n"

const geminiSSE = `data: {"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":1},"modelVersion":"gem-1"}` + "\r\n\r\n" +
	`data: {"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":4,"cachedContentTokenCount":10,"thoughtsTokenCount":6},"modelVersion":"gem-1"}` + "\r\n\r\n"

func one(model string, in, out, cr, cw, reasoning int64, complete bool) harness.Metered {
	u := harness.MeteredUsage{Requests: 1, ReasoningTokens: reasoning, Usage: harness.Usage{
		InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw, Complete: complete}}
	return harness.Metered{MeteredUsage: u, ByModel: map[string]harness.MeteredUsage{model: u}}
}

// TestStreams: every API's usage, whole and streamed, read in any
// chunking (1 byte, 7 bytes, 64 KiB), with cache and reasoning counters.
func TestStreams(t *testing.T) {
	for _, tc := range []struct {
		name, api, ct, body string
		want                harness.Metered
	}{
		{"anthropic/sse", Anthropic, sse, anthropicSSE, one("claude-x", 5, 321, 2000, 100, 0, true)},
		{"anthropic/json", Anthropic, ctJSON, `{"type":"message","model":"claude-x","content":[],"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":321}}`, one("claude-x", 5, 321, 2000, 100, 0, true)},
		{"responses/sse", OpenAIResponses, sse, responsesSSE, one("gpt-x", 400, 50, 600, 0, 40, true)},
		{"responses/json", OpenAIResponses, ctJSON, `{"object":"response","model":"gpt-x","usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":600},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":40}}}`, one("gpt-x", 400, 50, 600, 0, 40, true)},
		{"chat/sse", OpenAIChat, sse, chatSSE, one("gpt-c", 63, 9, 7, 0, 2, true)},
		{"chat/json", OpenAIChat, ctJSON, `{"model":"gpt-c","choices":[],"usage":{"prompt_tokens":70,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":7},"completion_tokens_details":{"reasoning_tokens":2}}}`, one("gpt-c", 63, 9, 7, 0, 2, true)},
		{"gemini/sse", Gemini, sse, geminiSSE, one("gem-1", 20, 10, 10, 0, 6, true)},
		{"gemini/json-array", Gemini, ctJSON, `[{"candidates":[{"content":{}}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":1}},{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":4,"cachedContentTokenCount":10,"thoughtsTokenCount":6},"modelVersion":"gem-1"}]`, one("gem-1", 20, 10, 10, 0, 6, true)},
		// A stream without its last usage event is counted as far as it
		// went and marked incomplete.
		{"chat/sse-without-usage", OpenAIChat, sse, `data: {"model":"gpt-c","choices":[{"delta":{"content":"hi"}}]}` + "\n\ndata: [DONE]\n\n", one("gpt-c", 0, 0, 0, 0, 0, false)},
		{"anthropic/sse-cut", Anthropic, sse, anthropicSSE[:strings.Index(anthropicSSE, "event: message_delta")], one("claude-x", 5, 1, 2000, 100, 0, false)},
		{"anthropic/json-malformed", Anthropic, ctJSON, `{"type":"message","model":"claude-x","usage":{"input_tokens":5,`, one("unknown", 0, 0, 0, 0, 0, false)},
		{"responses/negative", OpenAIResponses, ctJSON, `{"model":"gpt-x","usage":{"input_tokens":-5,"output_tokens":-1}}`, one("gpt-x", 0, 0, 0, 0, 0, true)},
		{"responses/not-a-number", OpenAIResponses, sse, `data: {"type":"response.completed","response":{"model":"gpt-x","usage":{"input_tokens":1e400}}}` + "\n\n", one("unknown", 0, 0, 0, 0, 0, false)},
	} {
		for _, n := range []int{1, 7, 64 << 10} {
			got := meterOf(tc.api, tc.ct, tc.body, n, -1)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s, %d-byte reads (-want +got):\n%s", tc.name, n, diff)
			}
		}
	}
}

// TestClosedEarly: a body closed before its end (the agent hung up) is
// counted as far as it was read and marked incomplete.
func TestClosedEarly(t *testing.T) {
	cut := strings.Index(anthropicSSE, "event: content_block_delta")
	got := meterOf(Anthropic, sse, anthropicSSE, 5, cut)
	if diff := cmp.Diff(one("claude-x", 5, 1, 2000, 100, 0, false), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestErrorStatus: an error response is a request with no tokens, and
// its body is not read.
func TestErrorStatus(t *testing.T) {
	m := New(Options{APIs: []string{Anthropic}})
	body := io.NopCloser(strings.NewReader(`{"usage":{"input_tokens":99}}`))
	resp := &http.Response{StatusCode: 529, Header: http.Header{}, Body: body}
	m.After(resp, 0)
	if resp.Body != body {
		t.Error("the body of an error response was wrapped")
	}
	if diff := cmp.Diff(one("unknown", 0, 0, 0, 0, 0, true), m.Metered()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzBody: any bytes, in any chunking, as any API's SSE or JSON body:
// no panic, no negative count, the bytes pass through unchanged.
func FuzzBody(f *testing.F) {
	for _, s := range []string{anthropicSSE, responsesSSE, chatSSE, geminiSSE, `[{"usageMetadata":{}}]`, "data: {\"usage\":\n\n"} {
		f.Add(s, uint8(3), uint8(0), true)
	}
	apis := []string{Anthropic, OpenAIResponses, OpenAIChat, Gemini, "other"}
	f.Fuzz(func(t *testing.T, body string, n, api uint8, stream bool) {
		ct := ctJSON
		if stream {
			ct = sse
		}
		m := New(Options{APIs: []string{apis[int(api)%len(apis)]}})
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}},
			Body: io.NopCloser(chunked{strings.NewReader(body), int(n%64) + 1})}
		m.After(resp, 0)
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != body {
			t.Fatalf("the body changed: %q, %v", got, err)
		}
		resp.Body.Close()
		u := m.Metered()
		if u.Requests != 1 || u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheWriteTokens < 0 || u.ReasoningTokens < 0 {
			t.Fatalf("metered %+v", u)
		}
	})
}

// TestCompression: the meter asks the API for a plain body (the agent's
// Accept-Encoding goes), and a compressed one it gets all the same is a
// request with an incomplete count, its body untouched.
func TestCompression(t *testing.T) {
	m := New(Options{APIs: []string{Anthropic}})
	r, _ := http.NewRequest(http.MethodPost, "http://x/v1/messages", strings.NewReader("{}"))
	r.Header.Set("Accept-Encoding", "gzip, br")
	if m.Before(r, 0) != nil || r.Header.Get("Accept-Encoding") != "" {
		t.Fatalf("Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
	}
	body := io.NopCloser(strings.NewReader("\x1f\x8b compressed"))
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {"br"}}, Body: body, Request: r}
	m.After(resp, 0)
	if resp.Body != body {
		t.Error("a compressed body was wrapped")
	}
	if diff := cmp.Diff(one("unknown", 0, 0, 0, 0, 0, false), m.Metered()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
