package gemini

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/outposthq/outpost/internal/fakeapi"
)

func post(t *testing.T, s *Server, path, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

const userBody = `{"contents":[{"role":"user","parts":[{"text":"ctx"},{"text":"hello %s"}]}],"tools":[{"functionDeclarations":[{"name":"run_shell_command"}]}]}`

// sseEvents decodes the data lines of a server-sent event stream.
func sseEvents(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimRight(sc.Text(), "\r"), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestStreamTextWithUsage(t *testing.T) {
	s := Start(t, Config{})
	resp, b := post(t, s, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", strings.Replace(userBody, "%s", "", 1), map[string]string{"x-goog-api-key": "k1"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := sseEvents(t, b)
	var text strings.Builder
	for _, ev := range evs {
		c := ev["candidates"].([]any)[0].(map[string]any)
		for _, p := range c["content"].(map[string]any)["parts"].([]any) {
			text.WriteString(p.(map[string]any)["text"].(string))
		}
	}
	if text.String() != DefaultText || len(evs) != 2 {
		t.Errorf("%d events, text %q", len(evs), text.String())
	}
	last := evs[len(evs)-1]
	var u Usage
	b, _ = json.Marshal(last["usageMetadata"])
	if err := json.Unmarshal(b, &u); err != nil || u != DefaultUsage || evs[0]["usageMetadata"] != nil {
		t.Errorf("usage %+v, want %+v only on the last event", u, DefaultUsage)
	}
	r := s.Requests()[0]
	if r.Model != "gemini-x" || !r.Stream || r.APIKey() != "k1" || r.LastUserText != "ctx\nhello " || !cmp.Equal(r.ToolNames, []string{"run_shell_command"}) {
		t.Errorf("request %+v", r)
	}
}

func TestMarkersAndFollowUp(t *testing.T) {
	s := Start(t, Config{})
	for _, tc := range []struct {
		marker string
		status int
		want   string
	}{
		{"FAKE_QUOTA", 429, `"status":"RESOURCE_EXHAUSTED"`},
		{"FAKE_429", 429, "Resource has been exhausted"},
		{"FAKE_503", 503, `"status":"UNAVAILABLE"`},
		{"FAKE_TOOL", 200, `"functionCall":{"args":{"command":"echo tool-ran"`},
		{"FAKE_ECHO", 200, "ECHO ncontents=1 last_user=ctx"},
	} {
		t.Run(tc.marker, func(t *testing.T) {
			resp, b := post(t, s, "/v1beta/models/m:generateContent?key=k2", strings.Replace(userBody, "%s", tc.marker, 1), nil)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
		})
	}
	if got := s.Requests()[0].APIKey(); got != "k2" {
		t.Errorf("key from the query: %q", got)
	}
	follow := `{"contents":[{"role":"user","parts":[{"text":"FAKE_TOOL"}]},{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"tool-ran\n"}}}]}]}`
	_, b := post(t, s, "/v1beta/models/m:generateContent", follow, nil)
	if !strings.Contains(string(b), "Tool output was: tool-ran") {
		t.Errorf("follow-up %s", b)
	}
}

func TestRouterQueueAndUnknownPath(t *testing.T) {
	s := Start(t, Config{})
	s.Enqueue(Text("queued"))
	router := `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"properties":{"complexity_score":{"type":"INTEGER"}}}}}`
	_, b := post(t, s, "/v1beta/models/flash-lite:generateContent", router, nil)
	if !strings.Contains(string(b), `complexity_score\":10`) {
		t.Errorf("router reply %s", b)
	}
	_, b = post(t, s, "/v1beta/models/m:generateContent", strings.Replace(userBody, "%s", "", 1), nil)
	if !strings.Contains(string(b), "queued") {
		t.Errorf("the router took the queued reply: %s", b)
	}
	resp, _ := post(t, s, "/v1/other", "{}", nil)
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	if n := len(s.Turns()); n != 1 {
		t.Errorf("%d turns, want 1 (neither the router nor the 404)", n)
	}
}

// TestDropBreaksTheStream: FAKE_DROP sends the reply's first event, then
// the connection closes before the body ends (streamed or not).
func TestDropBreaksTheStream(t *testing.T) {
	s := Start(t, Config{})
	for _, rpc := range []string{"streamGenerateContent?alt=sse", "generateContent"} {
		req, err := http.NewRequest(http.MethodPost, s.URL()+"/v1beta/models/gemini-x:"+rpc, strings.NewReader(strings.Replace(userBody, "%s", "FAKE_DROP", 1)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", rpc, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
			t.Errorf("%s: status %d, body %q, error %v; want 200 and a body that breaks off", rpc, resp.StatusCode, b, err)
		}
		if rpc != "generateContent" && !strings.Contains(string(b), `"partia"`) {
			t.Errorf("%s: the first event is missing: %q", rpc, b)
		}
	}
}

// TestReplyEnded: each generate request records how its reply ended: a
// reply written whole (an error included) is finished, a dropped one is
// its scenario's doing; other paths record nothing.
func TestReplyEnded(t *testing.T) {
	s := Start(t, Config{})
	post(t, s, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", strings.Replace(userBody, "%s", "", 1), nil)
	post(t, s, "/v1beta/models/gemini-x:generateContent", strings.Replace(userBody, "%s", "FAKE_429", 1), nil)
	post(t, s, "/v1beta/models", "", nil)
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1beta/models/gemini-x:streamGenerateContent?alt=sse", strings.NewReader(strings.Replace(userBody, "%s", "FAKE_DROP", 1)))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = got[:0]
		for _, r := range s.Requests() {
			got = append(got, r.Ended)
		}
		if len(got) == 4 && got[3] != "" {
			break
		}
	}
	if want := []string{fakeapi.EndFinished, fakeapi.EndFinished, "", fakeapi.EndScenario}; !slices.Equal(got, want) {
		t.Errorf("ended %q, want %q", got, want)
	}
}
