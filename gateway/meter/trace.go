package meter

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outposthq/outpost/harness"
)

// TracerName is the instrumentation scope of the model-call spans.
const TracerName = "github.com/outposthq/outpost/gateway/meter"

func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// system is gen_ai.system for an API.
func system(api string) string {
	switch api {
	case Anthropic:
		return "anthropic"
	case OpenAIResponses, OpenAIChat:
		return "openai"
	case Gemini:
		return "gcp.gemini"
	}
	return "_OTHER"
}

// start starts the call's span, a child of the meter's context. The
// requested model is read only when the span records (tracing is on).
func (c *call) start(r *http.Request) {
	_, c.span = c.m.tracer.Start(c.m.o.Context, "chat", trace.WithSpanKind(trace.SpanKindClient))
	if !c.span.IsRecording() {
		return
	}
	c.span.SetAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.system", system(c.api)),
		attribute.Int("outpost.gateway.route", c.route))
	if r == nil {
		return
	}
	if m := requestModel(r, c.api); m != "" {
		c.reqModel = m
		c.span.SetName("chat " + m)
		c.span.SetAttributes(attribute.String("gen_ai.request.model", m))
	}
}

// refused ends the span of a call a budget refused.
func (c *call) refused(x *Exceeded) {
	c.span.SetAttributes(attribute.String("outpost.budget", x.Budget))
	c.span.SetStatus(codes.Error, x.Error())
	c.span.End()
}

// end ends the call's span with its usage.
func (c *call) end(u harness.MeteredUsage, model string, clean bool) {
	if !c.span.IsRecording() {
		c.span.End()
		return
	}
	if model != "" {
		c.span.SetAttributes(attribute.String("gen_ai.response.model", model))
	}
	c.span.SetAttributes(
		attribute.Int("http.response.status_code", c.status),
		attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens),
		attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens),
		attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.CacheReadTokens),
		attribute.Int64("gen_ai.usage.cache_creation.input_tokens", u.CacheWriteTokens),
		attribute.Int64("gen_ai.usage.reasoning.output_tokens", u.ReasoningTokens),
		attribute.Bool("outpost.usage.complete", u.Complete))
	if c.status >= 400 {
		c.span.SetStatus(codes.Error, http.StatusText(c.status))
	} else if !clean {
		c.span.SetStatus(codes.Error, "response not read to its end")
	}
	c.span.End()
}

// peekModel bounds what requestModel reads of a request body.
const peekModel = 64 << 10

// requestModel is the model a request names: Gemini's in its path
// (models/NAME:method), the others' in the JSON body's top-level
// "model", read from the body's first bytes, which are put back.
func requestModel(r *http.Request, api string) string {
	if api == Gemini {
		if _, rest, ok := strings.Cut(r.URL.Path, "/models/"); ok {
			m, _, _ := strings.Cut(rest, ":")
			return limitModel(m)
		}
		return ""
	}
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	head := make([]byte, peekModel)
	n, err := io.ReadFull(r.Body, head)
	head = head[:n]
	rest := r.Body
	if err != nil { // the whole body was read
		rest = http.NoBody
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rest), r.Body}
	return limitModel(topModel(head))
}

// topModel finds the top-level "model" string of a JSON object's first
// bytes.
func topModel(head []byte) string {
	d := json.NewDecoder(bytes.NewReader(head))
	depth := 0
	key := true
	for {
		t, err := d.Token()
		if err != nil {
			return ""
		}
		switch v := t.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
			key = depth == 1
			continue
		case string:
			if depth == 1 && key && v == "model" {
				if t, err := d.Token(); err == nil {
					s, _ := t.(string)
					return s
				}
				return ""
			}
		}
		if depth == 1 {
			key = !key
		}
	}
}

func limitModel(m string) string {
	if len(m) > maxModel {
		return ""
	}
	return m
}
