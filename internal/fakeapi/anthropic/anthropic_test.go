package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
)

// userReq builds a Messages API request body with the given messages.
func userReq(stream bool, msgs ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "claude-test-1", "max_tokens": 1000, "stream": stream, "messages": msgs,
	})
	return b
}

func userText(text string) map[string]any {
	return map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "<system-reminder>\nignore me\n</system-reminder>"},
		map[string]any{"type": "text", "text": text},
	}}
}

func post(t *testing.T, base string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages?beta=true", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", "sk-fake")
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func streamMessage(t *testing.T, base string, body []byte) ([]Event, AssembledMessage) {
	t.Helper()
	resp := post(t, base, body)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	events, err := ParseSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Assemble(events)
	if err != nil {
		t.Fatal(err)
	}
	return events, m
}

func eventNames(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	return out
}

func TestTextStream(t *testing.T) {
	srv := New(t, Options{})
	evs, m := streamMessage(t, srv.URL(), userReq(true, userText("say hi")))

	want := []string{"message_start", "ping", "content_block_start"}
	for range splitWords(DefaultText) {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if got := eventNames(evs); !reflect.DeepEqual(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != DefaultText {
		t.Errorf("content = %+v", m.Content)
	}
	if m.StopReason != "end_turn" || !m.Stopped {
		t.Errorf("stop = %q stopped=%v", m.StopReason, m.Stopped)
	}
	if m.Usage != (Usage{InputTokens: 12, OutputTokens: 7}) {
		t.Errorf("usage = %+v", m.Usage)
	}
	if m.Model != "claude-test-1" || m.ID != "msg_fake_1" {
		t.Errorf("model %q id %q", m.Model, m.ID)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if !r.IsMessages() || r.RawQuery != "beta=true" || r.APIKey != "sk-fake" || !r.Stream ||
		r.NumMessages != 1 || r.LastUserText != "say hi" || r.Scenario != "text" || r.MaxTokens != 1000 {
		t.Errorf("recorded %+v", r)
	}
	if r.Header.Get("Anthropic-Version") != "2023-06-01" || r.JSON["model"] != "claude-test-1" {
		t.Errorf("headers/json not recorded: %v %v", r.Header, r.JSON["model"])
	}
}

func TestConfiguredTextAndUsage(t *testing.T) {
	srv := New(t, Options{Text: "custom reply", Usage: Usage{InputTokens: 100, OutputTokens: 50}, Model: "m-x"})
	_, m := streamMessage(t, srv.URL(), userReq(true, userText("x")))
	if m.Content[0].Text != "custom reply" || m.Usage != (Usage{100, 50}) || m.Model != "m-x" {
		t.Errorf("got %+v", m)
	}
}

func TestSSERoundTrip(t *testing.T) {
	type ev struct {
		name string
		data any
	}
	in := []ev{
		{"message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "m1"}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "line1\nline2 \"quoted\" ünï"}}},
		{"ping", json.RawMessage(`{"type": "ping"}`)},
		{"message_stop", []byte(`{"type":"message_stop"}`)},
	}
	var buf bytes.Buffer
	for _, e := range in {
		if err := WriteEvent(&buf, e.name, e.data); err != nil {
			t.Fatal(err)
		}
	}
	// Every event is exactly "event: X\ndata: {...}\n\n".
	if n := strings.Count(buf.String(), "\n\n"); n != len(in) {
		t.Fatalf("%d event terminators in %q", n, buf.String())
	}
	out, err := ParseSSE(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("parsed %d events, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].Name != in[i].name {
			t.Errorf("event %d name %q, want %q", i, out[i].Name, in[i].name)
		}
		var want, got any
		var wb []byte
		switch d := in[i].data.(type) {
		case json.RawMessage:
			wb = d
		case []byte:
			wb = d
		default:
			wb, _ = json.Marshal(d)
		}
		_ = json.Unmarshal(wb, &want)
		if err := json.Unmarshal(out[i].Data, &got); err != nil {
			t.Fatalf("event %d data %q: %v", i, out[i].Data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("event %d data %v, want %v", i, got, want)
		}
	}
	if out[1].Type() != "content_block_delta" {
		t.Errorf("Type() = %q", out[1].Type())
	}

	// CRLF line ends, comments, multi-line data, a trailing event without blank line.
	raw := ": comment\r\nevent: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\nevent: b\ndata: {}\n\ndata: {\"y\":2}"
	evs, err := ParseSSE(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{"a", json.RawMessage("{\"x\":\n1}")}, {"b", json.RawMessage("{}")}, {"message", json.RawMessage(`{"y":2}`)}}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("parsed %q, want %q", evs, want)
	}
}

func TestThinking(t *testing.T) {
	srv := New(t, Options{})
	evs, m := streamMessage(t, srv.URL(), userReq(true, userText("please FAKE_THINK")))
	if len(m.Content) != 2 || m.Content[0].Type != "thinking" || m.Content[0].Thinking != DefaultThinking ||
		m.Content[0].Signature == "" || m.Content[1].Type != "text" || m.Content[1].Text != DefaultText {
		t.Fatalf("content %+v", m.Content)
	}
	var sawThinkingDelta bool
	for _, e := range evs {
		if strings.Contains(string(e.Data), `"thinking_delta"`) {
			sawThinkingDelta = true
		}
	}
	if !sawThinkingDelta {
		t.Error("no thinking_delta")
	}
	if srv.Requests()[0].Scenario != "think" {
		t.Errorf("scenario %q", srv.Requests()[0].Scenario)
	}
}

func TestToolThenEcho(t *testing.T) {
	srv := New(t, Options{})
	first := userText("FAKE_TOOL:ls -l /tmp\nmore text")
	_, m := streamMessage(t, srv.URL(), userReq(true, first))
	if len(m.Content) != 2 || m.Content[0].Text != "Running it." || m.Content[1].Type != "tool_use" ||
		m.Content[1].Name != "Bash" || m.StopReason != "tool_use" {
		t.Fatalf("tool reply %+v", m)
	}
	var in map[string]string
	if err := json.Unmarshal(m.Content[1].Input, &in); err != nil || in["command"] != "ls -l /tmp" {
		t.Fatalf("input %s: %v", m.Content[1].Input, err)
	}
	toolID := m.Content[1].ID

	assistant := map[string]any{"role": "assistant", "content": []any{
		map[string]any{"type": "text", "text": "Running it."},
		map[string]any{"type": "tool_use", "id": toolID, "name": "Bash", "input": in},
	}}
	result := map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": toolID, "content": "out1", "is_error": false},
	}}
	_, m2 := streamMessage(t, srv.URL(), userReq(true, first, assistant, result))
	if got, want := m2.Content[0].Text, "ECHO nmsg=3 last_user=[tool_result] out1"; got != want {
		t.Errorf("echo %q, want %q", got, want)
	}
	r := srv.MessageRequests()[1]
	if !r.HasToolResult || r.Scenario != "echo" {
		t.Errorf("second request %+v", r)
	}
	if got := r.UserTexts(); !reflect.DeepEqual(got, []string{"FAKE_TOOL:ls -l /tmp\nmore text", "[tool_result] out1"}) {
		t.Errorf("user texts %q", got)
	}
	if !strings.HasPrefix(r.Messages[1].Text, "Running it.\n[tool_use Bash] ") {
		t.Errorf("assistant text %q", r.Messages[1].Text)
	}
}

func TestDefaultToolCommand(t *testing.T) {
	srv := New(t, Options{ToolCommand: "sleep 1"})
	_, m := streamMessage(t, srv.URL(), userReq(true, userText("FAKE_TOOL")))
	if !strings.Contains(string(m.Content[1].Input), `"sleep 1"`) {
		t.Errorf("input %s", m.Content[1].Input)
	}
}

func TestQueueAndChoose(t *testing.T) {
	srv := New(t, Options{
		Choose: func(r *Request) (Scenario, bool) {
			if strings.Contains(r.LastUserText, "custom") {
				return Text("chosen"), true
			}
			return Scenario{}, false
		},
		Default: &Scenario{Kind: KindEcho},
	})
	srv.Enqueue(Text("queued1"), ToolUse("Write", map[string]string{"file_path": "/x"}))
	if srv.Queued() != 2 {
		t.Fatalf("queued %d", srv.Queued())
	}
	texts := func(m AssembledMessage) string {
		var s []string
		for _, b := range m.Content {
			s = append(s, b.Type+":"+b.Text+b.Name)
		}
		return strings.Join(s, ",")
	}
	steps := []struct{ prompt, want string }{
		{"FAKE_429 custom", "text:queued1"}, // queue wins over everything
		{"custom", "tool_use:Write"},
		{"custom FAKE_THINK", "text:chosen"}, // Choose wins over markers
		{"FAKE_THINK", "thinking:,text:" + DefaultText},
		{"plain", "text:ECHO nmsg=1 last_user=plain"}, // Default
	}
	for _, st := range steps {
		_, m := streamMessage(t, srv.URL(), userReq(true, userText(st.prompt)))
		if got := texts(m); got != st.want {
			t.Errorf("%q: got %q, want %q", st.prompt, got, st.want)
		}
	}
}

func TestNoMarkers(t *testing.T) {
	srv := New(t, Options{NoMarkers: true})
	_, m := streamMessage(t, srv.URL(), userReq(true, userText("FAKE_429")))
	if m.Content[0].Text != DefaultText {
		t.Errorf("got %+v", m)
	}
}

func TestErrors(t *testing.T) {
	reset := time.Unix(1795983811, 0)
	srv := New(t, Options{ResetsAt: reset})
	cases := []struct {
		marker, typ string
		status      int
		header      map[string]string
	}{
		{"FAKE_429", "rate_limit_error", 429, map[string]string{"Retry-After": "1"}},
		{"FAKE_USAGE_LIMIT", "rate_limit_error", 429, map[string]string{
			"anthropic-ratelimit-unified-status":               "rejected",
			"anthropic-ratelimit-unified-reset":                "1795983811",
			"anthropic-ratelimit-unified-representative-claim": "five_hour",
			"anthropic-ratelimit-unified-5h-status":            "rejected",
			"anthropic-ratelimit-unified-5h-utilization":       "1.0",
		}},
		{"FAKE_529", "overloaded_error", 529, nil},
		{"FAKE_500", "api_error", 500, nil},
		{"FAKE_401", "authentication_error", 401, nil},
		{"FAKE_403", "permission_error", 403, nil},
		{"FAKE_400", "invalid_request_error", 400, nil},
	}
	for _, c := range cases {
		resp := post(t, srv.URL(), userReq(true, userText(c.marker)))
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.marker, resp.StatusCode, c.status)
		}
		var body struct {
			Type  string       `json:"type"`
			Error APIErrorBody `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("%s: %v", c.marker, err)
		}
		if body.Type != "error" || body.Error.Type != c.typ || body.Error.Message == "" {
			t.Errorf("%s: body %+v", c.marker, body)
		}
		for k, v := range c.header {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: header %s = %q, want %q", c.marker, k, got, v)
			}
		}
		if resp.Header.Get("request-id") == "" {
			t.Errorf("%s: no request-id", c.marker)
		}
	}
	if got := UsageLimit(reset).ErrorMessage; got != "This request would exceed your account's rate limit. Please try again later." {
		t.Errorf("usage limit message %q", got)
	}
}

func TestNonStreaming(t *testing.T) {
	srv := New(t, Options{})
	srv.Enqueue(Bash("echo x"))
	resp := post(t, srv.URL(), userReq(false, userText("go")))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d ct %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var msg struct {
		Type       string           `json:"type"`
		StopReason string           `json:"stop_reason"`
		Content    []map[string]any `json:"content"`
		Usage      Usage            `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.StopReason != "tool_use" || len(msg.Content) != 1 ||
		msg.Content[0]["type"] != "tool_use" || msg.Usage != (Usage{12, 7}) {
		t.Errorf("got %+v", msg)
	}
	if in, _ := msg.Content[0]["input"].(map[string]any); in["command"] != "echo x" {
		t.Errorf("input %v", msg.Content[0]["input"])
	}
}

func TestSlowStream(t *testing.T) {
	srv := New(t, Options{})
	const delay = 60 * time.Millisecond
	srv.Enqueue(Slow("a b c", delay))
	resp := post(t, srv.URL(), userReq(true, userText("x")))
	br := bufio.NewReader(resp.Body)
	var deltaTimes []time.Time
	start := time.Now()
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "event: content_block_delta") {
			deltaTimes = append(deltaTimes, time.Now())
		}
		if err != nil {
			break
		}
	}
	if len(deltaTimes) != 3 {
		t.Fatalf("%d deltas", len(deltaTimes))
	}
	// Each delta is flushed on its own: they arrive spread out.
	if d := deltaTimes[2].Sub(start); d < 3*delay-10*time.Millisecond {
		t.Errorf("stream took %v, want >= %v", d, 3*delay)
	}
	if d := deltaTimes[2].Sub(deltaTimes[0]); d < 2*delay-10*time.Millisecond {
		t.Errorf("deltas not spread: %v", d)
	}
}

func TestStallUnblocksOnClose(t *testing.T) {
	srv, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Enqueue(Stall())
	resp := post(t, srv.URL(), userReq(true, userText("x")))
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if srv.InFlight() != 1 {
		t.Fatalf("inflight %d", srv.InFlight())
	}
	readDone := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(br)
		readDone <- err
	}()
	select {
	case <-readDone:
		t.Fatal("stalled stream ended by itself")
	case <-time.After(200 * time.Millisecond):
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while a stream was stalled")
	}
	if srv.InFlight() != 0 {
		t.Errorf("inflight after close %d", srv.InFlight())
	}
	select {
	case <-readDone:
	case <-time.After(5 * time.Second):
		t.Fatal("client still blocked after Close")
	}
}

func TestHangEndsWhenClientGoesAway(t *testing.T) {
	srv := New(t, Options{})
	srv.Enqueue(Hang())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/v1/messages",
		bytes.NewReader(userReq(true, userText("x"))))
	_, err := http.DefaultClient.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded (no headers)", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("handler still running after client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStreamError(t *testing.T) {
	srv := New(t, Options{})
	evs, m := streamMessage(t, srv.URL(), userReq(true, userText("FAKE_STREAM_ERROR")))
	if got := eventNames(evs); !reflect.DeepEqual(got, []string{"message_start", "error"}) {
		t.Errorf("events %v", got)
	}
	if m.Error == nil || m.Error.Type != "overloaded_error" {
		t.Errorf("error %+v", m.Error)
	}
}

func TestOtherPaths(t *testing.T) {
	srv := New(t, Options{})
	resp, err := http.Head(srv.URL() + "/api/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD /api/hello: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "not_found_error") {
		t.Errorf("GET /nope: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Post(srv.URL()+"/v1/messages/count_tokens", "application/json", strings.NewReader(`{"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "input_tokens") {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, b)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].Method != "HEAD" || reqs[0].Path != "/api/hello" || len(srv.MessageRequests()) != 0 {
		t.Errorf("requests %+v", reqs)
	}
}

func TestWaitMessages(t *testing.T) {
	srv := New(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan []Request, 1)
	go func() {
		reqs, err := srv.WaitMessages(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- reqs
	}()
	streamMessage(t, srv.URL(), userReq(true, userText("one")))
	streamMessage(t, srv.URL(), userReq(true, userText("two")))
	if reqs := <-got; len(reqs) != 2 || reqs[1].LastUserText != "two" {
		t.Errorf("got %+v", reqs)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := srv.WaitMessages(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
}

func TestRefusedURL(t *testing.T) {
	u, err := RefusedURL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("url %q", u)
	}
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(u, "http://"), time.Second)
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded")
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		if s, err := Start(Options{Addr: addr}); err == nil {
			s.Close()
			t.Errorf("Start(%q) succeeded", addr)
		}
	}
	s, err := Start(Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(s.Addr())
	if p, _ := strconv.Atoi(port); p == 0 || s.URL() != "http://127.0.0.1:"+port {
		t.Errorf("addr %q url %q", s.Addr(), s.URL())
	}
	s.Close()
	s.Close() // idempotent
	if _, err := http.Get(s.URL() + "/api/hello"); err == nil {
		t.Error("server still answering after Close")
	}
}

func TestScenarioByName(t *testing.T) {
	for _, n := range ScenarioNames() {
		sc, ok := ScenarioByName(n, nil)
		if !ok || sc.Kind == "" || sc.name() == "" {
			t.Errorf("%s: %+v %v", n, sc, ok)
		}
		if sc2, ok := MarkerScenario("x "+Marker(n)+" y", nil); !ok || sc2.Kind != sc.Kind || sc2.Name != sc.Name {
			t.Errorf("marker %s: %+v", Marker(n), sc2)
		}
	}
	if _, ok := ScenarioByName("nope", nil); ok {
		t.Error("unknown name accepted")
	}
}

func TestMessageFlattening(t *testing.T) {
	body := map[string]any{"messages": []any{
		map[string]any{"role": "user", "content": "plain string"},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>only reminder</system-reminder>"},
		}},
		map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "thinking", "thinking": "hidden"},
			map[string]any{"type": "text", "text": "visible"},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": []any{
				map[string]any{"type": "text", "text": "r1"}, map[string]any{"type": "text", "text": "r2"}}},
			map[string]any{"type": "text", "text": "The user sent a new message"},
		}},
		map[string]any{"role": "system", "content": "env"},
	}}
	b, _ := json.Marshal(body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	r := Request{JSON: m}
	r.fillMessages()
	want := []Message{
		{"user", "plain string", []string{"text"}},
		{"user", "<system-reminder>only reminder</system-reminder>", []string{"text"}},
		{"assistant", "visible", []string{"thinking", "text"}},
		{"user", "[tool_result] r1\nr2\nThe user sent a new message", []string{"tool_result", "text"}},
		{"system", "env", []string{"text"}},
	}
	if !reflect.DeepEqual(r.Messages, want) {
		t.Errorf("messages\n%q\nwant\n%q", r.Messages, want)
	}
	if r.NumMessages != 5 || !r.HasToolResult || r.LastUserText != want[3].Text {
		t.Errorf("request %+v", r)
	}
}

// TestReplyEnded: each Messages request records how its reply ended: a
// reply read whole is finished, one whose client leaves mid-stream is
// client gone, one its scenario cuts says so.
func TestReplyEnded(t *testing.T) {
	srv := New(t, Options{})
	streamMessage(t, srv.URL(), userReq(true, userText("hello")))
	streamMessage(t, srv.URL(), userReq(true, userText("FAKE_STREAM_ERROR")))

	srv.Enqueue(Slow("a b c d e f g h", 200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/v1/messages", bytes.NewReader(userReq(true, userText("x"))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for srv.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	for _, r := range srv.MessageRequests() {
		got = append(got, r.Ended)
	}
	if want := []string{fakeapi.EndFinished, fakeapi.EndScenario, fakeapi.EndClientGone}; !reflect.DeepEqual(got, want) {
		t.Errorf("ended %q, want %q", got, want)
	}
}
