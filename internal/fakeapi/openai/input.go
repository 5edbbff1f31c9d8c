package openai

import (
	"cmp"
	"encoding/json"

	"github.com/outposthq/outpost/internal/fakeapi"
)

// What Chat Completions and the Responses API say alike, in bodies laid
// out a little apart: the input items (Chat's messages, Responses' input
// array), the structured-output format, the tools offered and the shell
// tool a scenario's call goes to. Each API's parser names its own members;
// these helpers read them one way.

// itemKind is what an input item counts as in the request's summary.
type itemKind int

const (
	otherItem      itemKind = iota
	userItem                // a user message: its text joins UserTexts
	toolOutputItem          // a tool's output: ToolOutput while it is the last item
)

// parseItems walks the input items in order; classify names each one's
// type (LastItemType), its kind and the value holding its text (a string
// or content parts, see fakeapi.ContentText).
func parseItems(req *Request, items []any, classify func(m map[string]any) (typ string, kind itemKind, text any)) {
	req.NumInput = len(items)
	for _, it := range items {
		m, _ := it.(map[string]any)
		if m == nil {
			continue
		}
		typ, kind, text := classify(m)
		req.LastItemType = typ
		req.ToolOutput = ""
		switch kind {
		case userItem:
			t := fakeapi.ContentText(text)
			req.UserTexts = append(req.UserTexts, t)
			req.LastUserText = t
		case toolOutputItem:
			req.ToolOutput = fakeapi.ContentText(text)
		}
	}
}

// parseOutputFormat sets OutputFormat from the body's format object
// (Chat's response_format, Responses' text.format) unless it is missing
// or asks for plain text.
func parseOutputFormat(req *Request, format any) {
	if f, ok := format.(map[string]any); ok {
		if typ, _ := f["type"].(string); typ != "" && typ != "text" {
			req.OutputFormat = f
		}
	}
}

// parseToolNames lists the names of the tools offered (the body's
// "tools"). A tool's name is its own name or its function's (Chat nests
// function tools' names, Responses does not: functionFirst says which is
// looked at first), else its type (a built-in tool).
func parseToolNames(req *Request, tools any, functionFirst bool) {
	list, _ := tools.([]any)
	for _, t := range list {
		m, _ := t.(map[string]any)
		if m == nil {
			continue
		}
		own, _ := m["name"].(string)
		var function string
		if f, ok := m["function"].(map[string]any); ok {
			function, _ = f["name"].(string)
		}
		builtin, _ := m["type"].(string)
		name := cmp.Or(own, function, builtin)
		if functionFirst {
			name = cmp.Or(function, own, builtin)
		}
		req.ToolNames = append(req.ToolNames, name)
	}
}

// shellTool picks the tool name and arguments for a shell tool call: the
// scenario's, else the first of prefer that the request offers (prefer[0]
// when it offers none); the arguments, unless the scenario sets them, are
// argsFor's for that tool and the scenario's command, as JSON.
func shellTool(req *Request, sc Scenario, prefer []string, argsFor func(name, command string) any) (name, args string) {
	name, args = sc.ToolName, sc.Arguments
	if name == "" {
		name = prefer[0]
		for _, n := range prefer {
			if req.HasTool(n) {
				name = n
				break
			}
		}
	}
	if args == "" {
		b, _ := json.Marshal(argsFor(name, sc.Command))
		args = string(b)
	}
	return name, args
}
