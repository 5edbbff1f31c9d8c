package meter

import (
	"bytes"
	"encoding/json"
)

// The model APIs a meter reads (harness.Endpoint.API).
const (
	Anthropic       = "anthropic"
	OpenAIResponses = "openai-responses"
	OpenAIChat      = "openai-chat"
	Gemini          = "gemini"
)

// reading is what one response said about its usage so far. Token
// counts are outpost's (harness.Usage): input without the cached part,
// output with the reasoning part.
type reading struct {
	in, out, cacheRead, cacheWrite, reasoning int64
	model                                     string
	seen                                      bool // some usage was read
	final                                     bool // the API's last word on usage was read
	broken                                    bool // something usage-bearing could not be read
}

// event reads one JSON document of api's: a whole response body, or one
// SSE event's data. It never fails: what it cannot read marks r broken
// when it carried usage.
func (r *reading) event(api string, data []byte) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("[DONE]")) {
		return
	}
	if data[0] == '[' { // Gemini's streamGenerateContent without alt=sse
		var all []json.RawMessage
		if json.Unmarshal(data, &all) != nil {
			r.broken = true
			return
		}
		for _, d := range all {
			r.event(api, d)
		}
		return
	}
	switch api {
	case Anthropic:
		r.anthropic(data)
	case OpenAIResponses:
		r.responses(data)
	case OpenAIChat:
		r.chat(data)
	case Gemini:
		r.gemini(data)
	}
}

// decode decodes data into v; data that does not decode marks r broken
// when it holds key (usage it cannot read).
func (r *reading) decode(data []byte, v any, key string) bool {
	if json.Unmarshal(data, v) != nil {
		r.broken = r.broken || bytes.Contains(data, []byte(key))
		return false
	}
	return true
}

// num is a token count as the APIs send it; a negative or absent one is 0.
type num = *int64

func val(n num) int64 {
	if n == nil || *n < 0 {
		return 0
	}
	return *n
}

type anthropicUsage struct {
	Input      num `json:"input_tokens"`
	Output     num `json:"output_tokens"`
	CacheRead  num `json:"cache_read_input_tokens"`
	CacheWrite num `json:"cache_creation_input_tokens"`
}

// anthropic reads a Messages response (usage, whole) or one of its SSE
// events: message_start carries the input side, message_delta the
// running totals (the last one is final).
func (r *reading) anthropic(data []byte) {
	var v struct {
		Type    string          `json:"type"`
		Model   string          `json:"model"`
		Usage   *anthropicUsage `json:"usage"`
		Message *struct {
			Model string          `json:"model"`
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
	}
	if !r.decode(data, &v, `"usage"`) {
		return
	}
	switch {
	case v.Type == "message_start" && v.Message != nil:
		r.setModel(v.Message.Model)
		r.anthropicSet(v.Message.Usage)
	case v.Type == "message_delta":
		if v.Usage != nil {
			r.anthropicSet(v.Usage)
			r.final = true
		}
	case v.Type == "message":
		r.setModel(v.Model)
		if v.Usage != nil {
			r.anthropicSet(v.Usage)
			r.final = true
		}
	}
}

// anthropicSet takes the counters u has; the others keep their value.
func (r *reading) anthropicSet(u *anthropicUsage) {
	if u == nil {
		return
	}
	r.seen = true
	set := func(dst *int64, n num) {
		if n != nil {
			*dst = val(n)
		}
	}
	set(&r.in, u.Input)
	set(&r.out, u.Output)
	set(&r.cacheRead, u.CacheRead)
	set(&r.cacheWrite, u.CacheWrite)
}

type responsesUsage struct {
	Input   num         `json:"input_tokens"`
	Output  num         `json:"output_tokens"`
	InputD  *cachedD    `json:"input_tokens_details"`
	OutputD *reasoningD `json:"output_tokens_details"`
}

// cachedD and reasoningD are OpenAI's usage details; nil counts 0.
type (
	cachedD struct {
		Cached num `json:"cached_tokens"`
	}
	reasoningD struct {
		Reasoning num `json:"reasoning_tokens"`
	}
)

func (d *cachedD) n() int64 {
	if d == nil {
		return 0
	}
	return val(d.Cached)
}

func (d *reasoningD) n() int64 {
	if d == nil {
		return 0
	}
	return val(d.Reasoning)
}

type responsesBody struct {
	Model string          `json:"model"`
	Usage *responsesUsage `json:"usage"`
}

// responses reads a Responses API response, or its SSE events: the
// response.completed (or .incomplete, .failed) event holds the usage.
func (r *reading) responses(data []byte) {
	var v struct {
		responsesBody
		Object   string         `json:"object"`
		Type     string         `json:"type"`
		Response *responsesBody `json:"response"`
	}
	if !r.decode(data, &v, `"usage"`) {
		return
	}
	b := &v.responsesBody
	if v.Response != nil {
		b = v.Response
	}
	r.setModel(b.Model)
	if u := b.Usage; u != nil {
		r.openai(val(u.Input), u.InputD.n(), val(u.Output), u.OutputD.n())
	}
}

// openai sets the counters from OpenAI's, whose input includes the
// cached tokens.
func (r *reading) openai(in, cached, out, reasoning int64) {
	r.in, r.cacheRead = max(in-cached, 0), cached
	r.out, r.reasoning = out, reasoning
	r.seen, r.final = true, true
}

// chat reads a Chat Completions response or chunk: usage is on the
// response, and on the last chunk of a stream asked with
// stream_options.include_usage.
func (r *reading) chat(data []byte) {
	var v struct {
		Model string `json:"model"`
		Usage *struct {
			Prompt     num         `json:"prompt_tokens"`
			Completion num         `json:"completion_tokens"`
			PromptD    *cachedD    `json:"prompt_tokens_details"`
			CompD      *reasoningD `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	if !r.decode(data, &v, `"usage"`) {
		return
	}
	r.setModel(v.Model)
	if u := v.Usage; u != nil {
		r.openai(val(u.Prompt), u.PromptD.n(), val(u.Completion), u.CompD.n())
	}
}

// gemini reads a GenerateContentResponse (whole or one streamed chunk):
// usageMetadata holds running totals, final on the chunk with a
// finishReason. Output is candidates plus thoughts.
func (r *reading) gemini(data []byte) {
	var v struct {
		ModelVersion string `json:"modelVersion"`
		Candidates   []struct {
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
		Usage *struct {
			Prompt     num `json:"promptTokenCount"`
			Candidates num `json:"candidatesTokenCount"`
			Cached     num `json:"cachedContentTokenCount"`
			Thoughts   num `json:"thoughtsTokenCount"`
		} `json:"usageMetadata"`
	}
	if !r.decode(data, &v, `"usageMetadata"`) {
		return
	}
	r.setModel(v.ModelVersion)
	if u := v.Usage; u != nil {
		cached := val(u.Cached)
		r.in, r.cacheRead = max(val(u.Prompt)-cached, 0), cached
		r.reasoning = val(u.Thoughts)
		r.out = val(u.Candidates) + r.reasoning
		r.seen = true
		for _, c := range v.Candidates {
			if c.FinishReason != "" {
				r.final = true
			}
		}
	}
}

func (r *reading) setModel(m string) {
	if m != "" && len(m) <= maxModel {
		r.model = m
	}
}

// maxModel bounds a model name taken from a response.
const maxModel = 200
