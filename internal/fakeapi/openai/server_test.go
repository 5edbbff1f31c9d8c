package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
)

type sseEvent struct {
	Name string
	Data string
	JSON map[string]any
}

// readSSE reads events until EOF or error; it returns the events and the read error
// (nil on a clean EOF).
func readSSE(r io.Reader) ([]sseEvent, error) {
	var out []sseEvent
	br := bufio.NewReader(r)
	var cur sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if cur.Data != "" {
				_ = json.Unmarshal([]byte(cur.Data), &cur.JSON)
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
}

func post(t *testing.T, ctx context.Context, url, key string, body any) (*http.Response, error) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return http.DefaultClient.Do(req)
}

// responsesBody is a Codex-like request: developer + user messages and the exec_command
// and apply_patch tools.
func responsesBody(prompt string, extra ...map[string]any) map[string]any {
	input := []any{
		map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "base instructions"}}},
		map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context/>"}}},
		map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}},
	}
	for _, e := range extra {
		input = append(input, e)
	}
	return map[string]any{
		"model": "gpt-5.5", "stream": true, "input": input,
		"tools": []any{
			map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{}},
			map[string]any{"type": "custom", "name": "apply_patch"},
			map[string]any{"type": "web_search"},
		},
	}
}

func doResponses(t *testing.T, s *Server, body map[string]any) (*http.Response, []sseEvent, error) {
	t.Helper()
	resp, err := post(t, context.Background(), s.URL()+"/responses", "sk-fake", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, nil, nil
	}
	evs, rerr := readSSE(resp.Body)
	return resp, evs, rerr
}

func names(evs []sseEvent) []string {
	var n []string
	for _, e := range evs {
		n = append(n, e.Name)
	}
	return n
}

func last(evs []sseEvent) sseEvent {
	if len(evs) == 0 {
		return sseEvent{}
	}
	return evs[len(evs)-1]
}

func doneItems(evs []sseEvent) []map[string]any {
	var items []map[string]any
	for _, e := range evs {
		if e.Name == "response.output_item.done" {
			items = append(items, e.JSON["item"].(map[string]any))
		}
	}
	return items
}

func TestResponsesText(t *testing.T) {
	s := Start(t, Config{Text: "Hi there, friend.", Usage: &Usage{InputTokens: 211, CachedTokens: 20, OutputTokens: 43, ReasoningTokens: 2}})
	resp, evs, err := doResponses(t, s, responsesBody("Say hello"))
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content-type %q", ct)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	got := names(evs)
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("events %v, want prefix %v", got, want)
		}
	}
	var text strings.Builder
	for _, e := range evs {
		if e.Name == "response.output_text.delta" {
			text.WriteString(e.JSON["delta"].(string))
		}
		if e.JSON["type"] != e.Name {
			t.Errorf("event %s has type %v", e.Name, e.JSON["type"])
		}
	}
	if text.String() != "Hi there, friend." {
		t.Errorf("deltas joined = %q", text.String())
	}
	fin := last(evs)
	if fin.Name != "response.completed" {
		t.Fatalf("last event %s", fin.Name)
	}
	u := fin.JSON["response"].(map[string]any)["usage"].(map[string]any)
	if u["input_tokens"] != 211.0 || u["output_tokens"] != 43.0 || u["total_tokens"] != 254.0 ||
		u["input_tokens_details"].(map[string]any)["cached_tokens"] != 20.0 ||
		u["output_tokens_details"].(map[string]any)["reasoning_tokens"] != 2.0 {
		t.Errorf("usage %v", u)
	}
	items := doneItems(evs)
	if len(items) != 1 || items[0]["type"] != "message" {
		t.Fatalf("items %v", items)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/responses" || r.API != APIResponses || r.Served != KindText {
		t.Errorf("request %s %s %s %s", r.Method, r.Path, r.API, r.Served)
	}
	if r.Authorization() != "Bearer sk-fake" || r.BearerToken() != "sk-fake" {
		t.Errorf("auth %q", r.Authorization())
	}
	if r.NumInput != 3 || r.LastUserText != "Say hello" || len(r.UserTexts) != 2 || r.LastItemType != "message" {
		t.Errorf("summary n=%d last=%q users=%v type=%s", r.NumInput, r.LastUserText, r.UserTexts, r.LastItemType)
	}
	if !r.HasTool("exec_command") || !r.HasTool("apply_patch") || !r.HasTool("web_search") || r.Model != "gpt-5.5" || !r.Stream {
		t.Errorf("tools %v model %q stream %v", r.ToolNames, r.Model, r.Stream)
	}
	if r.Body["model"] != "gpt-5.5" {
		t.Errorf("body %v", r.Body)
	}
}

func TestResponsesReasoning(t *testing.T) {
	s := Start(t, Config{})
	_, evs, err := doResponses(t, s, responsesBody("think FAKE_REASONING"))
	if err != nil {
		t.Fatal(err)
	}
	items := doneItems(evs)
	if len(items) != 2 || items[0]["type"] != "reasoning" || items[1]["type"] != "message" {
		t.Fatalf("items %v", items)
	}
	sum := items[0]["summary"].([]any)[0].(map[string]any)
	if sum["text"] != DefaultReasoning {
		t.Errorf("summary %v", sum)
	}
	seen := map[string]bool{}
	for _, n := range names(evs) {
		seen[n] = true
	}
	for _, n := range []string{"response.reasoning_summary_part.added", "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done"} {
		if !seen[n] {
			t.Errorf("missing %s", n)
		}
	}
}

func TestResponsesToolCallThenText(t *testing.T) {
	s := Start(t, Config{Command: "echo hi"})
	_, evs, err := doResponses(t, s, responsesBody("run FAKE_TOOL"))
	if err != nil {
		t.Fatal(err)
	}
	items := doneItems(evs)
	if len(items) != 1 || items[0]["type"] != "function_call" || items[0]["name"] != "exec_command" {
		t.Fatalf("items %v", items)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(items[0]["arguments"].(string)), &args); err != nil || args["cmd"] != "echo hi" {
		t.Fatalf("arguments %v (%v)", items[0]["arguments"], err)
	}
	callID := items[0]["call_id"].(string)
	if last(evs).Name != "response.completed" {
		t.Errorf("last %s", last(evs).Name)
	}

	// The follow-up carries the tool output; the marker is still in the last user text.
	body := responsesBody("run FAKE_TOOL",
		items[0],
		map[string]any{"type": "function_call_output", "call_id": callID, "output": "Output:\nhi\n"})
	_, evs, err = doResponses(t, s, body)
	if err != nil {
		t.Fatal(err)
	}
	items = doneItems(evs)
	if len(items) != 1 || items[0]["type"] != "message" {
		t.Fatalf("follow-up items %v", items)
	}
	text := items[0]["content"].([]any)[0].(map[string]any)["text"]
	if text != "Tool output was: Output: | hi" {
		t.Errorf("follow-up text %q", text)
	}
	r := s.Requests()[1]
	if !r.LastItemIsToolOutput() || r.ToolOutput != "Output:\nhi\n" || r.NumInput != 5 {
		t.Errorf("follow-up request type=%s out=%q n=%d", r.LastItemType, r.ToolOutput, r.NumInput)
	}
}

func TestResponsesToolNameFollowsOfferedTools(t *testing.T) {
	s := Start(t, Config{})
	body := responsesBody("x")
	body["tools"] = []any{map[string]any{"type": "function", "name": "shell"}}
	s.Enqueue(ToolCall("ls"))
	_, evs, _ := doResponses(t, s, body)
	it := doneItems(evs)[0]
	if it["name"] != "shell" || it["arguments"] != `{"command":["bash","-lc","ls"]}` {
		t.Errorf("item %v", it)
	}
	// Explicit tool name and arguments win.
	s.Enqueue(Scenario{Kind: KindToolCall, ToolName: "view_image", Arguments: `{"path":"a.png"}`})
	_, evs, _ = doResponses(t, s, responsesBody("x"))
	it = doneItems(evs)[0]
	if it["name"] != "view_image" || it["arguments"] != `{"path":"a.png"}` {
		t.Errorf("item %v", it)
	}
}

func TestResponsesApplyPatch(t *testing.T) {
	s := Start(t, Config{})
	_, evs, err := doResponses(t, s, responsesBody("edit FAKE_PATCH"))
	if err != nil {
		t.Fatal(err)
	}
	items := doneItems(evs)
	if len(items) != 1 || items[0]["type"] != "custom_tool_call" || items[0]["name"] != "apply_patch" || items[0]["input"] != DefaultPatch {
		t.Fatalf("items %v", items)
	}
	found := false
	for _, e := range evs {
		if e.Name == "response.custom_tool_call_input.delta" {
			found = true
		}
	}
	if !found {
		t.Error("no custom_tool_call_input.delta")
	}
	// Follow-up after custom_tool_call_output is a text reply.
	_, evs, _ = doResponses(t, s, responsesBody("edit FAKE_PATCH", items[0],
		map[string]any{"type": "custom_tool_call_output", "call_id": items[0]["call_id"], "output": "Success."}))
	if it := doneItems(evs); len(it) != 1 || it[0]["type"] != "message" {
		t.Errorf("follow-up %v", it)
	}
}

func TestResponsesEcho(t *testing.T) {
	s := Start(t, Config{})
	_, evs, _ := doResponses(t, s, responsesBody("what FAKE_ECHO"))
	text := doneItems(evs)[0]["content"].([]any)[0].(map[string]any)["text"]
	if text != "ECHO nmsg=3 last_user=what FAKE_ECHO" {
		t.Errorf("echo %q", text)
	}
}

func TestQueueAndChooser(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	s := Start(t, Config{Choose: func(r *Request) Scenario {
		mu.Lock()
		seen = append(seen, r.LastUserText)
		mu.Unlock()
		if strings.Contains(r.LastUserText, "custom") {
			return Text("chosen")
		}
		return Scenario{}
	}})
	s.Enqueue(Text("queued 1"), Echo())
	texts := []string{}
	for _, p := range []string{"a custom", "b custom", "c custom", "d FAKE_ECHO", "e"} {
		_, evs, _ := doResponses(t, s, responsesBody(p))
		texts = append(texts, doneItems(evs)[0]["content"].([]any)[0].(map[string]any)["text"].(string))
	}
	want := []string{"queued 1", "ECHO nmsg=3 last_user=b custom", "chosen", "ECHO nmsg=3 last_user=d FAKE_ECHO", DefaultText}
	for i := range want {
		if texts[i] != want[i] {
			t.Errorf("reply %d = %q, want %q", i, texts[i], want[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Errorf("chooser saw %v (queued requests must not reach it)", seen)
	}
	s.SetChooser(nil)
	s.Reset()
	if s.Count() != 0 {
		t.Error("Reset kept requests")
	}
}

func TestHTTPErrors(t *testing.T) {
	s := Start(t, Config{})
	cases := []struct {
		marker     string
		status     int
		body       string
		retryAfter string
	}{
		{"FAKE_429", 429, BodyRateLimit, ""},
		{"FAKE_429_RETRY", 429, BodyRateLimit, "1"},
		{"FAKE_USAGE_LIMIT", 429, BodyUsageLimit, ""},
		{"FAKE_QUOTA", 429, BodyInsufficientQuota, ""},
		{"FAKE_500", 500, Body500, ""},
		{"FAKE_503", 503, Body503, ""},
		{"FAKE_401", 401, Body401, ""},
	}
	for _, c := range cases {
		for _, path := range []string{"/responses", "/chat/completions"} {
			body := responsesBody("x " + c.marker)
			if path == "/chat/completions" {
				body = chatBody("x " + c.marker)
			}
			resp, err := post(t, context.Background(), s.URL()+path, "sk-fake", body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || string(b) != c.body || resp.Header.Get("Retry-After") != c.retryAfter {
				t.Errorf("%s %s: %d %q retry-after %q", c.marker, path, resp.StatusCode, b, resp.Header.Get("Retry-After"))
			}
			if !json.Valid(b) {
				t.Errorf("%s: body not JSON", c.marker)
			}
		}
	}
	var e struct {
		Error struct{ Type, Code string }
	}
	_ = json.Unmarshal([]byte(BodyUsageLimit), &e)
	if e.Error.Type != "usage_limit_reached" {
		t.Errorf("usage limit type %q", e.Error.Type)
	}
	_ = json.Unmarshal([]byte(BodyInsufficientQuota), &e)
	if e.Error.Code != "insufficient_quota" {
		t.Errorf("quota code %q", e.Error.Code)
	}
}

func TestResponsesStreamFailures(t *testing.T) {
	s := Start(t, Config{})

	// Dropped: the body ends with an error, never response.completed.
	_, evs, err := doResponses(t, s, responsesBody("x FAKE_DROP"))
	if err == nil {
		t.Error("drop: clean EOF, want a read error")
	}
	for _, e := range evs {
		if e.Name == "response.completed" || e.Name == "response.output_item.done" {
			t.Errorf("drop sent %s", e.Name)
		}
	}
	if len(evs) == 0 || last(evs).Name != "response.output_text.delta" {
		t.Errorf("drop events %v", names(evs))
	}

	// Truncated: a clean EOF without response.completed.
	_, evs, err = doResponses(t, s, responsesBody("x FAKE_TRUNCATE"))
	if err != nil || last(evs).Name != "response.output_text.delta" {
		t.Errorf("truncate: err=%v events %v", err, names(evs))
	}

	// response.failed with code and message.
	_, evs, _ = doResponses(t, s, responsesBody("x FAKE_FAILED"))
	fin := last(evs)
	if fin.Name != "response.failed" {
		t.Fatalf("failed: %v", names(evs))
	}
	e := fin.JSON["response"].(map[string]any)["error"].(map[string]any)
	if e["code"] != "server_error" || e["message"] != "fake failure" {
		t.Errorf("failed error %v", e)
	}
	_, evs, _ = doResponses(t, s, responsesBody("x FAKE_FAILED_CONTEXT"))
	if e := last(evs).JSON["response"].(map[string]any)["error"].(map[string]any); e["code"] != "context_length_exceeded" {
		t.Errorf("context failed error %v", e)
	}

	// Disconnect: no HTTP response at all.
	if resp, err := post(t, context.Background(), s.URL()+"/responses", "k", responsesBody("x FAKE_DISCONNECT")); err == nil {
		resp.Body.Close()
		t.Error("disconnect: got a response")
	}
}

func TestHangUntilClientGoesAway(t *testing.T) {
	s := Start(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := post(t, ctx, s.URL()+"/responses", "k", responsesBody("x FAKE_HANG"))
	if err == nil || time.Since(start) < 250*time.Millisecond {
		t.Errorf("hang: err=%v after %v", err, time.Since(start))
	}
	if s.Requests()[0].Served != KindHang {
		t.Errorf("served %s", s.Requests()[0].Served)
	}
}

func TestCloseUnblocksHungHandlers(t *testing.T) {
	s, err := New(Config{DeltaDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for _, p := range []string{"x FAKE_HANG", "x FAKE_STALL", "x FAKE_SLOW"} {
		go func(p string) {
			resp, err := post(t, context.Background(), s.URL()+"/responses", "k", responsesBody(p))
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}(p)
	}
	if !s.WaitForRequests(3, 5*time.Second) {
		t.Fatal("requests did not arrive")
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a hung request completed cleanly")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("client still blocked after Close")
		}
	}
	s.Close() // idempotent
	if s.WaitForRequests(10, time.Millisecond) {
		t.Error("WaitForRequests after Close")
	}
}

func TestSlowStream(t *testing.T) {
	s := Start(t, Config{})
	s.Enqueue(Slow(4, 60*time.Millisecond))
	start := time.Now()
	_, evs, err := doResponses(t, s, responsesBody("x"))
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	var deltas []string
	for _, e := range evs {
		if e.Name == "response.output_text.delta" {
			deltas = append(deltas, e.JSON["delta"].(string))
		}
	}
	if strings.Join(deltas, "") != "chunk 1 chunk 2 chunk 3 chunk 4 " || el < 240*time.Millisecond {
		t.Errorf("deltas %q in %v", deltas, el)
	}

	// A client that goes away mid-stream ends the handler early (steering aborts the request).
	s.Enqueue(Slow(100, 50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := post(t, ctx, s.URL()+"/responses", "k", responsesBody("x"))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l, "chunk 1 ") {
			break
		}
	}
	cancel()
	resp.Body.Close()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("slow handler kept running after the client left")
	}
}

func TestStallSendsHeadersOnly(t *testing.T) {
	s := Start(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := post(t, ctx, s.URL()+"/responses", "k", responsesBody("x FAKE_STALL"))
	if err != nil {
		t.Fatalf("stall must send headers: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, _ := br.ReadString('\n')
	if first != "event: response.created\n" {
		t.Errorf("first line %q", first)
	}
}

func TestNonStreaming(t *testing.T) {
	s := Start(t, Config{})
	body := responsesBody("x FAKE_REASONING")
	body["stream"] = false
	resp, err := post(t, context.Background(), s.URL()+"/responses", "k", body)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if r["status"] != "completed" || len(r["output"].([]any)) != 2 || r["usage"] == nil {
		t.Errorf("non-streaming response %v", r)
	}
	cb := chatBody("y FAKE_TOOL")
	cb["stream"] = false
	resp, err = post(t, context.Background(), s.URL()+"/chat/completions", "k", cb)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	ch := c["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || c["usage"].(map[string]any)["prompt_tokens"] != 100.0 {
		t.Errorf("non-streaming chat %v", c)
	}
}

func TestOtherPaths(t *testing.T) {
	s := Start(t, Config{})
	resp, err := http.Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("models %d", resp.StatusCode)
	}
	resp, err = http.Get(s.URL() + "/responses")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /responses %d", resp.StatusCode)
	}
	if n := len(s.Requests()); n != 2 || s.Requests()[1].API != APIOther {
		t.Errorf("requests %d", n)
	}
}

func TestRefusedURL(t *testing.T) {
	u, err := RefusedURL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/v1") {
		t.Errorf("url %q", u)
	}
	resp, err := http.Post(u+"/responses", "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("connection was not refused")
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %v", err)
	}
}

// ---------------------------------------------------------------------------------------
// Chat Completions

func chatBody(prompt string, extra ...map[string]any) map[string]any {
	msgs := []any{
		map[string]any{"role": "system", "content": "You are the GitHub Copilot CLI"},
		map[string]any{"role": "user", "content": "<current_datetime>now</current_datetime>\n\n" + prompt},
	}
	for _, e := range extra {
		msgs = append(msgs, e)
	}
	return map[string]any{
		"model": "gpt-4.1", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": msgs,
		"tools": []any{
			map[string]any{"type": "function", "function": map[string]any{"name": "bash", "parameters": map[string]any{}}},
			map[string]any{"type": "function", "function": map[string]any{"name": "view", "parameters": map[string]any{}}},
		},
	}
}

func doChat(t *testing.T, s *Server, body map[string]any) ([]sseEvent, error) {
	t.Helper()
	resp, err := post(t, context.Background(), s.URL()+"/chat/completions", "fake-key", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return readSSE(resp.Body)
}

func chatText(evs []sseEvent) (text, finish string, usage map[string]any, done bool) {
	var b strings.Builder
	for _, e := range evs {
		if e.Data == "[DONE]" {
			done = true
			continue
		}
		if u, ok := e.JSON["usage"].(map[string]any); ok {
			usage = u
		}
		for _, c := range e.JSON["choices"].([]any) {
			cm := c.(map[string]any)
			if d, ok := cm["delta"].(map[string]any)["content"].(string); ok {
				b.WriteString(d)
			}
			if f, ok := cm["finish_reason"].(string); ok {
				finish = f
			}
		}
	}
	return b.String(), finish, usage, done
}

func TestChatText(t *testing.T) {
	s := Start(t, Config{Usage: &Usage{InputTokens: 120, CachedTokens: 100, OutputTokens: 7}})
	evs, err := doChat(t, s, chatBody("say hi"))
	if err != nil {
		t.Fatal(err)
	}
	text, finish, usage, done := chatText(evs)
	if text != DefaultText || finish != "stop" || !done {
		t.Errorf("text %q finish %q done %v", text, finish, done)
	}
	if usage["prompt_tokens"] != 120.0 || usage["completion_tokens"] != 7.0 || usage["total_tokens"] != 127.0 ||
		usage["prompt_tokens_details"].(map[string]any)["cached_tokens"] != 100.0 {
		t.Errorf("usage %v", usage)
	}
	// The usage chunk has empty choices and comes right before [DONE].
	if u := evs[len(evs)-2]; len(u.JSON["choices"].([]any)) != 0 || u.JSON["usage"] == nil {
		t.Errorf("usage chunk %s", u.Data)
	}
	r := s.Requests()[0]
	if r.API != APIChat || r.Authorization() != "Bearer fake-key" || r.NumInput != 2 || !strings.HasSuffix(r.LastUserText, "say hi") || !r.HasTool("bash") {
		t.Errorf("request %+v", r)
	}

	// Without include_usage there is no usage chunk.
	b := chatBody("again")
	delete(b, "stream_options")
	evs, _ = doChat(t, s, b)
	if _, _, usage, _ := chatText(evs); usage != nil {
		t.Errorf("usage without include_usage: %v", usage)
	}
}

func TestChatToolCallThenText(t *testing.T) {
	s := Start(t, Config{Command: "echo tool-ran"})
	evs, err := doChat(t, s, chatBody("run FAKE_TOOL"))
	if err != nil {
		t.Fatal(err)
	}
	var name, args, id string
	for _, e := range evs {
		if e.Data == "[DONE]" {
			continue
		}
		for _, c := range e.JSON["choices"].([]any) {
			tcs, _ := c.(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any)
			for _, tc := range tcs {
				m := tc.(map[string]any)
				if v, ok := m["id"].(string); ok {
					id = v
				}
				f := m["function"].(map[string]any)
				if v, ok := f["name"].(string); ok {
					name = v
				}
				args += f["arguments"].(string)
			}
		}
	}
	_, finish, _, _ := chatText(evs)
	if name != "bash" || args != `{"command":"echo tool-ran","description":"Run a shell command"}` || id == "" || finish != "tool_calls" {
		t.Fatalf("tool call %q %q %q finish %q", name, args, id, finish)
	}
	body := chatBody("run FAKE_TOOL",
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}},
		map[string]any{"role": "tool", "tool_call_id": id, "content": "tool-ran\n<exited with exit code 0>"})
	evs, _ = doChat(t, s, body)
	text, finish, _, _ := chatText(evs)
	if text != "Tool output was: tool-ran | <exited with exit code 0>" || finish != "stop" {
		t.Errorf("follow-up %q %q", text, finish)
	}
	if r := s.Requests()[1]; r.LastItemType != "tool" || !r.LastItemIsToolOutput() || r.NumInput != 4 {
		t.Errorf("follow-up request %s n=%d", r.LastItemType, r.NumInput)
	}
}

func TestChatEchoAndFailures(t *testing.T) {
	s := Start(t, Config{})
	evs, _ := doChat(t, s, chatBody("hi FAKE_ECHO"))
	if text, _, _, _ := chatText(evs); text != "ECHO nmsg=2 last_user=<current_datetime>now</current_datetime>\n\nhi FAKE_ECHO" {
		t.Errorf("echo %q", text)
	}
	if _, err := doChat(t, s, chatBody("x FAKE_DROP")); err == nil {
		t.Error("chat drop: clean EOF")
	}
	evs, err := doChat(t, s, chatBody("x FAKE_TRUNCATE"))
	if _, finish, _, done := chatText(evs); err != nil || done || finish != "" {
		t.Errorf("chat truncate: err=%v done=%v finish=%q", err, done, finish)
	}
	evs, _ = doChat(t, s, chatBody("x FAKE_FAILED"))
	if e, ok := last(evs).JSON["error"].(map[string]any); !ok || e["message"] != "fake failure" {
		t.Errorf("chat failed: %s", last(evs).Data)
	}
	s.Enqueue(Slow(3, 10*time.Millisecond))
	evs, _ = doChat(t, s, chatBody("x"))
	if text, _, _, _ := chatText(evs); text != "chunk 1 chunk 2 chunk 3 " {
		t.Errorf("chat slow %q", text)
	}
}

func TestLogf(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	s := Start(t, Config{Logf: func(f string, a ...any) {
		mu.Lock()
		lines = append(lines, f)
		mu.Unlock()
	}})
	doChat(t, s, chatBody("x"))
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Errorf("log lines %v", lines)
	}
}

// TestReplyEnded: each model request records how its reply ended: a
// reply read whole (Responses or Chat, streamed or not, an error event
// included) is finished, one whose client leaves mid-stream is client
// gone, one its scenario cuts says so.
func TestReplyEnded(t *testing.T) {
	s := Start(t, Config{})
	if _, _, err := doResponses(t, s, responsesBody("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := doChat(t, s, chatBody("x")); err != nil {
		t.Fatal(err)
	}
	_, _, _ = doResponses(t, s, responsesBody("x FAKE_FAILED"))
	_, _, _ = doResponses(t, s, responsesBody("x FAKE_TRUNCATE"))
	_, _ = doChat(t, s, chatBody("x FAKE_TRUNCATE"))

	s.Enqueue(Slow(100, 50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := post(t, ctx, s.URL()+"/chat/completions", "k", chatBody("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	want := []string{fakeapi.EndFinished, fakeapi.EndFinished, fakeapi.EndFinished, fakeapi.EndScenario, fakeapi.EndScenario, fakeapi.EndClientGone}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = got[:0]
		for _, r := range s.Requests() {
			got = append(got, r.Ended)
		}
		if got[len(got)-1] != "" {
			break
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ended %q, want %q", got, want)
	}
}

// flushFails is a ResponseWriter whose writes succeed into its buffer
// but whose flush fails, as net/http's does once the client is gone.
type flushFails struct{ *httptest.ResponseRecorder }

func (f flushFails) FlushError() error { return errors.New("write: broken pipe") }

// TestSSEFlushFailureIsCut: a stream whose flush failed is not ok, so a
// reply whose last events never reached the client is not recorded as
// finished.
func TestSSEFlushFailureIsCut(t *testing.T) {
	e := newSSE(flushFails{httptest.NewRecorder()})
	e.event("response.completed", map[string]any{"type": "response.completed"})
	if e.ok() {
		t.Errorf("the stream is ok after a failed flush")
	}
	ok := newSSE(httptest.NewRecorder())
	ok.event("response.completed", map[string]any{"type": "response.completed"})
	if !ok.ok() {
		t.Errorf("the stream failed: %v", ok.err)
	}
}
