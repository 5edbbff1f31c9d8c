package codex

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// newTurnKey makes the key that keeps a turn's item ids apart from other
// turns': Codex numbers exec items item_0, item_1… afresh in every process,
// so the same thread has an item_0 in each of its turns. Tests replace it.
var newTurnKey = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// turnState is what both decoders (exec and app-server) keep for the
// running turn.
type turnState struct {
	s       settings
	key     string          // turn key of the ids, see newTurnKey
	started map[string]bool // items whose tool_call was emitted
	final   string          // the turn's last complete agent message
	failed  []string        // failure texts already emitted
	tools   int             // tool calls answered so far
	limited bool            // the budget failure was emitted
}

func (t *turnState) reset(key string) {
	t.key = key
	t.started = map[string]bool{}
	t.final = ""
	t.failed = nil
	t.tools = 0
	t.limited = false
}

// id returns the event id of a native item id: turn key + ":" + item id.
func (t *turnState) id(item string) string {
	if t.key == "" {
		t.reset(newTurnKey())
	}
	return t.key + ":" + item
}

// failure returns a failure event for text, or nothing when the same text
// was already reported in this turn (Codex sends a terminal error and then
// turn.failed with the same message).
func (t *turnState) failure(text string, details map[string]any) []harness.Event {
	for _, f := range t.failed {
		if f == text {
			return nil
		}
	}
	t.failed = append(t.failed, text)
	return []harness.Event{{Type: harness.EventFailure, Kind: failureKind(text), Text: text, Details: details}}
}

// toolDone counts an answered tool call against the max-model-requests
// budget and returns the limit failure when the budget is spent.
func (t *turnState) toolDone() []harness.Event {
	t.tools++
	if t.s.maxRequests <= 0 || t.limited || t.tools < t.s.maxRequests {
		return nil
	}
	t.limited = true
	return []harness.Event{{
		Type: harness.EventFailure,
		Kind: harness.KindLimit,
		Text: fmt.Sprintf("codex: the model asked for another request after %d tool calls, and the turn's budget is %s=%d", t.tools, OptionMaxModelRequests, t.s.maxRequests),
		Details: map[string]any{
			"limit":                OptionMaxModelRequests,
			OptionMaxModelRequests: t.s.maxRequests,
			"tool_calls":           t.tools,
		},
	}}
}

// decoder decodes `codex exec --json` output. It is stateful for one turn
// (one process: exec runs a single turn).
type decoder struct {
	turnState
	thread string
}

func newDecoder(s settings) *decoder {
	d := &decoder{}
	d.s = s
	return d
}

var reconnectRE = lazyre.New(`^Reconnecting\.\.\.\s*(?:(\d+)/(\d+))?`)

// retryNotice turns a "Reconnecting..." text into a retry notice.
func retryNotice(text string) harness.Event {
	ev := harness.Event{Type: harness.EventNotice, Kind: "retry", Text: text}
	if m := reconnectRE.FindStringSubmatch(strings.TrimSpace(text)); m != nil && m[1] != "" {
		n, _ := strconv.Atoi(m[1])
		of, _ := strconv.Atoi(m[2])
		ev.Details = map[string]any{"attempt": n, "max": of}
	} else if strings.Contains(text, "waiting for network") {
		ev.Details = map[string]any{"waiting_for_network": true}
	}
	return ev
}

// decode is the Events of one exec turn:
//
//	thread.started                     session
//	turn.started                       (a new turn key for the item ids)
//	item.started/completed:
//	  agent_message                    message
//	  reasoning                        reasoning
//	  command_execution                tool_call "command_execution", tool_result
//	  file_change                      tool_call "file_change", tool_result
//	  mcp_tool_call                    tool_call "mcp:<server>/<tool>", tool_result
//	  web_search                       tool_call "web_search", tool_result
//	  todo_list                        notice/plan
//	  error                            notice/warning (non-fatal: model metadata, WebSocket fallback)
//	  anything else                    notice/item
//	turn.completed                     finished (+ usage, see below)
//	error "Reconnecting..."            notice/retry (details attempt, max)
//	error, other                       failure
//	turn.failed                        failure (unless the error before it said the same)
//
// turn.completed's usage is the thread's running total. For a new thread
// that is the turn's usage; for a resumed or forked one it also holds the
// earlier turns (and the parent's history), so the finished event carries
// no usage — the turn's own is known after the turn, from the rollout
// (TranscriptUsage). Either way details.thread_usage holds the total.
func (d *decoder) decode(line []byte) []harness.Event {
	return kit.Guard(line, "codex", "output line", func() []harness.Event { return d.decodeObj(parseObj(line)) })
}

// decodeObj decodes a parsed line (nil: not a JSON object).
func (d *decoder) decodeObj(o obj) []harness.Event {
	if o == nil {
		return nil
	}
	switch o.str("type") {
	case "thread.started":
		id := o.str("thread_id")
		if id == "" {
			return nil
		}
		d.thread = id
		return []harness.Event{{Type: harness.EventSession, Session: id}}
	case "turn.started":
		d.reset(newTurnKey())
		return nil
	case "item.started":
		return d.item(o.obj("item"), snakeCase, false)
	case "item.updated":
		if it := o.obj("item"); it.str("type") == "todo_list" {
			return []harness.Event{planNotice(it)}
		}
		return nil
	case "item.completed":
		return d.item(o.obj("item"), snakeCase, true)
	case "turn.completed":
		ev := harness.Event{Type: harness.EventFinished, Text: d.final, Stop: "completed"}
		if u, ok := usageOf(o.obj("usage")); ok {
			ev.Details = map[string]any{"thread_usage": u}
			if !d.s.continues {
				ev.Usage = &u
			}
		}
		return []harness.Event{ev}
	case "turn.failed":
		msg := o.obj("error").str("message")
		if msg == "" {
			msg = "codex: the turn failed"
		}
		return d.failure(msg, nil)
	case "error":
		msg := o.str("message")
		if msg == "" {
			return nil
		}
		if isRetry(msg) {
			return []harness.Event{retryNotice(msg)}
		}
		return d.failure(msg, nil)
	}
	return nil
}

// spelling is how one of Codex's two output formats writes its items:
// `exec --json` in snake_case (type command_execution, field exit_code),
// the app-server in camelCase (commandExecution, exitCode). The items are
// the same; one decoder, item, reads both.
type spelling bool

const (
	snakeCase spelling = false // exec --json
	camelCase spelling = true  // app-server
)

// key is the name of a field, given in snake_case, in this spelling.
func (sp spelling) key(name string) string {
	if sp == snakeCase {
		return name
	}
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// snakeType is an item type in snake_case, whichever format spelled it:
// commandExecution is command_execution.
func snakeType(typ string) string {
	var b strings.Builder
	for _, r := range typ {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// item decodes an item of either format, spelled sp: item.started or
// item/started when !done, item.completed or item/completed when done.
// Types that only one format sends say which.
func (t *turnState) item(it obj, sp spelling, done bool) []harness.Event {
	if it == nil {
		return nil
	}
	id := t.id(it.str("id"))
	typ := it.str("type")
	switch kind := snakeType(typ); kind {
	case "agent_message":
		if !done {
			return nil
		}
		text := it.str("text")
		t.final = text
		return []harness.Event{{Type: harness.EventMessage, ID: id, Text: text}}
	case "reasoning":
		if !done {
			return nil
		}
		if sp == snakeCase {
			return []harness.Event{{Type: harness.EventReasoning, ID: id, Text: it.str("text")}}
		}
		// The app-server's reasoning is a summary and a content, lists of texts.
		var parts []string
		for _, raw := range append(it.list("summary"), it.list("content")...) {
			var s string
			if json.Unmarshal(raw, &s) == nil && s != "" {
				parts = append(parts, s)
			}
		}
		if len(parts) == 0 {
			return nil
		}
		return []harness.Event{{Type: harness.EventReasoning, ID: id, Text: strings.Join(parts, "\n")}}
	case "command_execution":
		return t.toolItem(id, done, commandCall(id, it.str("command")), func() harness.Event {
			code, hasCode := it.num(sp.key("exit_code"))
			return commandResult(id, it.str(sp.key("aggregated_output")), it.str("status"), code, hasCode)
		})
	case "file_change":
		return t.toolItem(id, done, fileChangeCall(id, it), func() harness.Event { return fileChangeResult(id, it) })
	case "mcp_tool_call", "dynamic_tool_call": // dynamic: app-server
		name := "mcp:" + it.str("server") + "/" + it.str("tool")
		if kind == "dynamic_tool_call" {
			name = "dynamic:" + it.str("tool")
		}
		call := harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: name, Input: it.rawJSON("arguments")}}
		return t.toolItem(id, done, call, func() harness.Event {
			status := it.str("status")
			res := harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: id}, Details: map[string]any{"status": status}}
			if e := it.obj("error"); e != nil {
				res.Tool.Output, res.Tool.Error = e.str("message"), true
			} else if r := it.raw("result"); r != nil {
				res.Tool.Output = string(r)
			} else if r := it.raw("contentItems"); r != nil { // app-server
				res.Tool.Output = string(r)
			}
			res.Tool.Error = res.Tool.Error || status == "failed" || string(it.raw("success")) == "false"
			return res
		})
	case "web_search":
		return t.toolItem(id, done, webSearchCall(id, it), func() harness.Event { return harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: id}} })
	case "todo_list": // exec
		return []harness.Event{planNotice(it)}
	case "plan": // app-server
		if done {
			return []harness.Event{{Type: harness.EventNotice, Kind: "plan", ID: id, Text: it.str("text")}}
		}
	case "error": // exec
		if done {
			return []harness.Event{{Type: harness.EventNotice, Kind: "warning", ID: id, Text: it.str("message")}}
		}
	case "context_compaction": // app-server
		if done {
			return []harness.Event{{Type: harness.EventNotice, Kind: "compaction", ID: id, Text: "codex compacted the conversation"}}
		}
	case "user_message", "hook_prompt", "": // app-server, and nothing
	default:
		if done {
			return []harness.Event{{Type: harness.EventNotice, Kind: "item", ID: id, Text: "codex item " + typ, Details: map[string]any{"type": typ}}}
		}
	}
	return nil
}

// toolItem emits a tool item: its call when the item starts, and when it
// completes its call (unless already emitted) and result.
func (t *turnState) toolItem(id string, done bool, call harness.Event, result func() harness.Event) []harness.Event {
	if !done {
		t.started[id] = true
		return []harness.Event{call}
	}
	return t.finishTool(id, call, result())
}

// commandCall and commandResult are a command execution item's events.
func commandCall(id, command string) harness.Event {
	return harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: "command_execution", Input: marshal(map[string]string{"command": command})}}
}

func commandResult(id, output, status string, code int64, hasCode bool) harness.Event {
	res := harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: id, Output: output}, Details: map[string]any{"status": status}}
	if hasCode {
		res.Details["exit_code"] = code
	}
	res.Tool.Error = status == "failed" || status == "declined" || (hasCode && code != 0)
	return res
}

// fileChangeCall and fileChangeResult are a file change item's events.
func fileChangeCall(id string, it obj) harness.Event {
	return harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: "file_change", Input: marshal(map[string]any{"changes": it.raw("changes")})}}
}

func fileChangeResult(id string, it obj) harness.Event {
	status := it.str("status")
	return harness.Event{Type: harness.EventToolResult, Tool: &harness.Tool{ID: id, Output: changesText(it.objs("changes")), Error: status == "failed" || status == "declined"}, Details: map[string]any{"status": status}}
}

// webSearchCall is a web search item's call; its result carries nothing.
func webSearchCall(id string, it obj) harness.Event {
	return harness.Event{Type: harness.EventToolCall, Tool: &harness.Tool{ID: id, Name: "web_search", Input: marshal(map[string]string{"query": it.str("query")})}}
}

// finishTool completes a tool item: its call (when item.started was never seen,
// as for some sandbox-denied commands), its result, and the budget check.
func (t *turnState) finishTool(id string, call, res harness.Event) []harness.Event {
	var evs []harness.Event
	if !t.started[id] {
		evs = append(evs, call)
	}
	t.started[id] = true
	evs = append(evs, res)
	return append(evs, t.toolDone()...)
}

// changesText summarizes file changes as "<kind> <path>" lines. A kind is a
// string (exec) or an object with a type (app-server).
func changesText(changes []obj) string {
	var b strings.Builder
	for _, c := range changes {
		kind := c.str("kind")
		if kind == "" {
			kind = c.obj("kind").str("type")
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.TrimSpace(kind + " " + c.str("path")))
	}
	return b.String()
}

// planNotice shows a todo list.
func planNotice(it obj) harness.Event {
	var b strings.Builder
	for _, i := range it.objs("items") {
		mark := "[ ]"
		if i.boolean("completed") {
			mark = "[x]"
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(mark + " " + i.str("text"))
	}
	return harness.Event{Type: harness.EventNotice, Kind: "plan", Text: b.String()}
}
