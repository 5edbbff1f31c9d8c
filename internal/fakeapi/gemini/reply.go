package gemini

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// parseRequest records what a test asserts on: the path's model and RPC,
// the contents' texts, a trailing function response, the tools offered
// and the response schema asked for. A body that is not JSON is kept raw.
func parseRequest(hr *http.Request, body []byte) *Request {
	r := &Request{
		Time: time.Now(), Method: hr.Method, Path: hr.URL.Path, Query: hr.URL.RawQuery,
		Header: hr.Header.Clone(), RawBody: body,
	}
	if rest, ok := strings.CutPrefix(r.Path, "/v1beta/models/"); ok {
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			r.Model, r.RPC = rest[:i], rest[i+1:]
		}
	}
	r.Stream = r.RPC == "streamGenerateContent"
	if json.Unmarshal(body, &r.Body) != nil {
		return r
	}
	contents, _ := r.Body["contents"].([]any)
	r.NumContents = len(contents)
	for i, c := range contents {
		cm, _ := c.(map[string]any)
		parts, _ := cm["parts"].([]any)
		var texts []string
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			if t, ok := pm["text"].(string); ok {
				texts = append(texts, t)
			}
			if fr, ok := pm["functionResponse"].(map[string]any); ok && i == len(contents)-1 {
				r.HasFunctionResponse = true
				r.FunctionResponseName, _ = fr["name"].(string)
				resp, _ := fr["response"].(map[string]any)
				if out, ok := resp["output"].(string); ok {
					r.FunctionResponse = out
				} else if b, err := json.Marshal(resp); err == nil {
					r.FunctionResponse = string(b)
				}
			}
		}
		if role, _ := cm["role"].(string); role == "user" && len(texts) > 0 {
			r.UserTexts = append(r.UserTexts, strings.Join(texts, "\n"))
		}
	}
	if n := len(r.UserTexts); n > 0 {
		r.LastUserText = r.UserTexts[n-1]
	}
	tools, _ := r.Body["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		decls, _ := tm["functionDeclarations"].([]any)
		for _, d := range decls {
			dm, _ := d.(map[string]any)
			if n, ok := dm["name"].(string); ok {
				r.ToolNames = append(r.ToolNames, n)
			}
		}
	}
	gc, _ := r.Body["generationConfig"].(map[string]any)
	for _, k := range []string{"responseJsonSchema", "responseSchema"} {
		if sch, ok := gc[k]; ok {
			r.ResponseSchema, _ = json.Marshal(sch)
			break
		}
	}
	return r
}

// reply answers one generate request with sc: an error body, or
// candidates as one JSON object (generateContent) or as SSE events
// (streamGenerateContent?alt=sse), the last carrying finishReason and
// usageMetadata.
func (s *Server) reply(w http.ResponseWriter, r *Request, sc Scenario) (finished bool) {
	s.served(r, sc.name())
	for k, vs := range sc.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if sc.Delay > 0 || sc.Kind == KindHang {
		d := sc.Delay
		if sc.Kind == KindHang {
			d = 24 * time.Hour
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.life.Done():
			return
		}
	}
	if sc.Kind == KindError {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(sc.Status)
		_, err := w.Write(sc.errorBody())
		return err == nil
	}
	usage := *s.cfg.Usage
	if sc.Usage != nil {
		usage = *sc.Usage
	}
	chunks := s.parts(r, sc)
	if !r.Stream {
		// One response: the text in one part, then the call.
		var parts []any
		var text strings.Builder
		for _, c := range chunks {
			if t, ok := c["text"].(string); ok {
				text.WriteString(t)
				continue
			}
			parts = append(parts, c)
		}
		parts = append([]any{map[string]any{"text": text.String()}}, parts...)
		if sc.Kind == KindDrop {
			b, _ := json.Marshal(response(r, parts, &usage))
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b[:len(b)/2])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, http.StatusOK, response(r, parts, &usage))
		return true
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for i, c := range chunks {
		var u *Usage
		if i == len(chunks)-1 {
			u = &usage
		}
		b, err := json.Marshal(response(r, []any{c}, u))
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "data: %s\r\n\r\n", b); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
		if sc.Kind == KindDrop {
			// net/http closes the connection without ending the
			// chunked body: the client sees the stream break off.
			panic(http.ErrAbortHandler)
		}
	}
	return true
}

// parts are the reply's parts, one per SSE event: the text cut in
// sc.Chunks pieces, then the function call.
func (s *Server) parts(r *Request, sc Scenario) []map[string]any {
	var out []map[string]any
	text := sc.Text
	switch sc.Kind {
	case KindText:
		if text == "" {
			text = s.cfg.Text
		}
	case KindEcho:
		text = fmt.Sprintf("ECHO ncontents=%d last_user=%s", r.NumContents, r.LastUserText)
	case KindRouter:
		text = `{"reasoning":"fake router","model_choice":"flash"}`
		if strings.Contains(string(r.ResponseSchema), "complexity_score") {
			text = `{"complexity_reasoning":"fake router","complexity_score":10}`
		}
	}
	n := sc.Chunks
	if n <= 0 {
		n = 2
	}
	for _, piece := range split(text, n) {
		out = append(out, map[string]any{"text": piece})
	}
	if sc.Kind == KindCall {
		args := sc.Args
		if args == nil {
			args = map[string]any{}
		}
		out = append(out, map[string]any{"functionCall": map[string]any{"name": sc.Call, "args": args}})
	}
	if len(out) == 0 {
		out = append(out, map[string]any{"text": ""})
	}
	return out
}

// split cuts text into at most n non-empty pieces on rune boundaries.
func split(text string, n int) []string {
	rs := []rune(text)
	if len(rs) == 0 {
		return nil
	}
	n = min(n, len(rs))
	var out []string
	for i := range n {
		out = append(out, string(rs[i*len(rs)/n:(i+1)*len(rs)/n]))
	}
	return out
}

// response is one GenerateContentResponse; with usage it is the last
// one, with a finishReason.
func response(r *Request, parts []any, usage *Usage) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	out := map[string]any{"candidates": []any{cand}, "modelVersion": r.Model, "responseId": fmt.Sprintf("fake-%d", r.Seq)}
	if usage != nil {
		cand["finishReason"] = "STOP"
		out["usageMetadata"] = usage
	}
	return out
}
