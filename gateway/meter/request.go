package meter

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// DefaultMaxOutput is what an abandoned or cut response whose usage
// could not be read is charged as output when its request named no
// output limit (max_tokens and its equivalents).
const DefaultMaxOutput = 32000

// prepared is what Before read of a request's body.
type prepared struct {
	maxOut int64 // the request's output limit, or DefaultMaxOutput
	strip  bool  // include_usage was added: the usage-only chunk is not the agent's
}

// prepare reads the request's body (up to maxJSON; a larger one is
// passed on unread and charged at DefaultMaxOutput) for its output limit,
// and asks an openai-chat stream for its usage
// (stream_options.include_usage) when the agent did not: without it the
// API reports none.
func prepare(r *http.Request, api string) prepared {
	p := prepared{maxOut: DefaultMaxOutput}
	if r.Body == nil || r.Body == http.NoBody {
		return p
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxJSON+1))
	rest := r.Body
	setBody := func(b []byte, tail io.ReadCloser) {
		if tail == nil {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), tail), tail}
	}
	if err != nil || len(b) > maxJSON {
		setBody(b, rest)
		return p
	}
	_ = rest.Close()
	var v map[string]json.RawMessage
	if json.Unmarshal(b, &v) != nil {
		setBody(b, nil)
		return p
	}
	if n := maxOutput(api, v); n > 0 {
		p.maxOut = n
	}
	if api == OpenAIChat && string(v["stream"]) == "true" && !includesUsage(v["stream_options"]) {
		if nb, ok := withUsage(v); ok {
			b, p.strip = nb, true
		}
	}
	setBody(b, nil)
	return p
}

// maxOutput is the output limit a request names, or 0.
func maxOutput(api string, v map[string]json.RawMessage) int64 {
	var keys []string
	switch api {
	case Anthropic:
		keys = []string{"max_tokens"}
	case OpenAIChat:
		keys = []string{"max_completion_tokens", "max_tokens"}
	case OpenAIResponses:
		keys = []string{"max_output_tokens"}
	case Gemini:
		var gc struct {
			Max int64 `json:"maxOutputTokens"`
		}
		if json.Unmarshal(v["generationConfig"], &gc) == nil {
			return gc.Max
		}
		return 0
	}
	for _, k := range keys {
		var n int64
		if json.Unmarshal(v[k], &n) == nil && n > 0 {
			return n
		}
	}
	return 0
}

func includesUsage(raw json.RawMessage) bool {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(raw, &so) == nil && so.IncludeUsage
}

// withUsage is the request body v with stream_options.include_usage set,
// the other stream options kept.
func withUsage(v map[string]json.RawMessage) ([]byte, bool) {
	so := map[string]json.RawMessage{}
	if raw, ok := v["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &so) != nil {
			return nil, false
		}
	}
	so["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(so)
	if err != nil {
		return nil, false
	}
	v["stream_options"] = raw
	b, err := json.Marshal(v)
	return b, err == nil
}

// stripUsage passes an openai-chat SSE stream on without its usage-only
// chunk (no choices, a usage), which the agent did not ask for. It holds
// back only the current event (bounded by maxEvent, beyond which it
// passes the bytes on as they are).
type stripUsage struct {
	rc  io.ReadCloser
	in  []byte // read, not yet a whole event
	out []byte // to give the agent
	buf []byte
	err error
}

func (s *stripUsage) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			if len(s.in) == 0 {
				return 0, s.err
			}
			s.out, s.in = s.in, nil
			break
		}
		if s.buf == nil {
			s.buf = make([]byte, 32<<10)
		}
		n, err := s.rc.Read(s.buf)
		s.in, s.err = append(s.in, s.buf[:n]...), err
		for {
			i := eventEnd(s.in)
			if i < 0 {
				break
			}
			if !usageOnly(s.in[:i]) {
				s.out = append(s.out, s.in[:i]...)
			}
			s.in = s.in[i:]
		}
		if len(s.in) > maxEvent {
			s.out, s.in = append(s.out, s.in...), nil
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 {
		s.out = nil
	}
	return n, nil
}

func (s *stripUsage) Close() error { return s.rc.Close() }

// eventEnd is the length of the first whole SSE event of b (with its
// blank line), or -1.
func eventEnd(b []byte) int {
	i, j := bytes.Index(b, []byte("\n\n")), bytes.Index(b, []byte("\n\r\n"))
	switch {
	case i < 0 && j < 0:
		return -1
	case j < 0 || (i >= 0 && i < j):
		return i + 2
	}
	return j + 3
}

// usageOnly says whether an SSE event is a chat chunk with usage and no
// choices.
func usageOnly(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"usage"`)) {
		return false
	}
	var data []byte
	for _, line := range bytes.Split(ev, []byte("\n")) {
		if d, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\r")), []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	return json.Unmarshal(data, &v) == nil && len(v.Choices) == 0 && len(v.Usage) > 0 && string(v.Usage) != "null"
}
