package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// ClientName is the clientInfo.name outpost gives the app-server; Codex
// records it as the originator of the threads it starts.
const ClientName = "outpost"

// ClientVersion is the clientInfo.version outpost gives the app-server:
// the version of the preset's protocol use, which the app-server only
// reports back (it is not the CLI's version, which bootstrap/pins.json
// pins).
const ClientVersion = "1.0.0"

// LiveInput runs a turn through `codex app-server`, Codex's JSON-RPC
// protocol over standard input and output, so messages can reach the agent
// while it works:
//
//	initialize → initialized → thread/start | thread/resume | thread/fork
//	→ turn/start → (turn/steer {expectedTurnId}, turn/interrupt)* → turn/completed
//
// A message sent while the turn runs is a turn/steer (injected: during a
// model stream Codex abandons the stream and asks again with the message;
// during a command it is delivered with the command's result); one sent
// before the turn has its id waits for it. Notifications are decoded into
// the same events as exec's output, deltas included; the structured
// error{codexErrorInfo, willRetry} notifications make retry notices of the
// retries and tag terminal failures with their codexErrorInfo, which Quota
// and Unavailable read. Requests for approval are declined (turns run with
// approvalPolicy "never", so none are expected). Extra arguments may only be
// configuration (-c/--config, --enable, --disable): the app-server has none
// of exec's other flags.
func LiveInput(in harness.Input) (harness.Live, error) {
	s, err := parseSettings(in)
	if err != nil {
		return nil, err
	}
	if in.Fork && in.Conversation == "" {
		return nil, errors.New("codex: fork needs the thread to fork")
	}
	if in.Conversation != "" && !ValidThreadID(in.Conversation) {
		return nil, fmt.Errorf("codex: %q is not a Codex thread id", in.Conversation)
	}
	if in.Model != "" && !validModel(in.Model) {
		return nil, fmt.Errorf("codex: invalid model name %q", in.Model)
	}
	args := []string{"app-server"}
	for _, p := range s.configPairs() {
		args = append(args, "-c", p)
	}
	for i := 0; i < len(in.ExtraArgs); i++ {
		a := in.ExtraArgs[i]
		switch {
		case a == "-c" || a == "--config" || a == "--enable" || a == "--disable":
			if i+1 >= len(in.ExtraArgs) {
				return nil, fmt.Errorf("codex: extra argument %s has no value", a)
			}
			args = append(args, a, in.ExtraArgs[i+1])
			i++
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "--enable="), strings.HasPrefix(a, "--disable="),
			strings.HasPrefix(a, "-c") && !strings.HasPrefix(a, "--"):
			args = append(args, a)
		default:
			return nil, fmt.Errorf("codex: extra argument %q is not available with live input (codex app-server takes only -c, --enable and --disable)", a)
		}
	}
	l := &live{
		in:      in,
		cmd:     harness.Command{Path: Program, Args: args, Env: env(in), KeepStdin: true},
		pending: map[int64]string{},
	}
	l.s = s
	return l, nil
}

// live is one app-server turn. Decode runs on the engine's output reader;
// Send and Interrupt on other goroutines: mu guards everything.
type live struct {
	mu sync.Mutex
	turnState
	in  harness.Input
	cmd harness.Command

	next    int64
	pending map[int64]string // request id -> method

	thread     string
	turn       string // the running turn's id, once turn/start answered
	queued     []string
	interrupt  bool // interrupt as soon as the turn has its id
	done       bool
	usageBase  *harness.Usage // the thread's total before this turn
	usageTotal *harness.Usage // the thread's latest total
}

func (l *live) Command() harness.Command { return l.cmd }

// request writes one JSON-RPC request.
func (l *live) request(w io.Writer, method string, params any) error {
	l.next++
	id := l.next
	l.pending[id] = method
	return writeLine(w, map[string]any{"id": id, "method": method, "params": params})
}

func writeLine(w io.Writer, v any) error {
	b := marshal(v)
	if b == nil {
		return errors.New("codex: could not encode a JSON-RPC message")
	}
	_, err := w.Write(append(b, '\n'))
	return err
}

func (l *live) Begin(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.request(w, "initialize", map[string]any{
		"clientInfo": map[string]any{"name": ClientName, "title": "Outpost", "version": ClientVersion},
	})
}

// threadParams are the settings of thread/start, thread/resume and
// thread/fork.
func (l *live) threadParams() map[string]any {
	p := map[string]any{"approvalPolicy": "never"}
	if l.in.Workdir != "" {
		p["cwd"] = l.in.Workdir
	}
	if l.s.sandbox != "" {
		p["sandbox"] = l.s.sandbox
	}
	if l.in.Model != "" {
		p["model"] = l.in.Model
	}
	return p
}

func textInput(text string) []map[string]any {
	return []map[string]any{{"type": "text", "text": text}}
}

func (l *live) Send(w io.Writer, text string) (harness.Steer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return harness.SteerInjected, errors.New("codex: the turn is over")
	}
	if strings.TrimSpace(text) == "" {
		return harness.SteerInjected, nil // nothing to say
	}
	if l.turn == "" {
		l.queued = append(l.queued, text) // steered in once the turn has its id
		return harness.SteerInjected, nil
	}
	return harness.SteerInjected, l.steer(w, text)
}

func (l *live) steer(w io.Writer, text string) error {
	return l.request(w, "turn/steer", map[string]any{"threadId": l.thread, "expectedTurnId": l.turn, "input": textInput(text)})
}

func (l *live) Interrupt(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	if l.turn == "" {
		l.interrupt = true
		return nil
	}
	return l.request(w, "turn/interrupt", map[string]any{"threadId": l.thread, "turnId": l.turn})
}

func (l *live) Done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Decode decodes one app-server message and writes what the protocol
// needs next: the handshake's next steps, queued steers, replies to the
// server's requests.
func (l *live) Decode(line []byte, w io.Writer) []harness.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return kit.Guard(line, "codex", "app-server message", func() []harness.Event { return l.decode(parseObj(line), w) })
}

// decode is Decode of a parsed message (nil: not a JSON object), under l.mu.
func (l *live) decode(o obj, w io.Writer) []harness.Event {
	if o == nil {
		return nil
	}
	method := o.str("method")
	switch {
	case method != "" && o.has("id"):
		return l.serverRequest(o, method, w)
	case method != "":
		return l.notification(method, o.obj("params"))
	case o.has("id") && (o.has("result") || o.has("error")):
		return l.response(o, w)
	}
	return nil
}

// fail ends the turn with a protocol failure.
func (l *live) fail(text string) []harness.Event {
	l.done = true
	return []harness.Event{{Type: harness.EventFailure, Text: text}}
}

func (l *live) response(o obj, w io.Writer) []harness.Event {
	id, _ := o.num("id")
	method, ok := l.pending[id]
	if !ok {
		return nil
	}
	delete(l.pending, id)
	if e := o.obj("error"); e != nil {
		msg := e.str("message")
		switch method {
		case "turn/steer":
			return []harness.Event{{Type: harness.EventNotice, Kind: "steer", Text: "codex did not take the message: " + msg, Details: map[string]any{"delivered": false}}}
		case "turn/interrupt":
			return []harness.Event{{Type: harness.EventNotice, Kind: "interrupt", Text: "codex did not interrupt the turn: " + msg}}
		}
		return l.fail(fmt.Sprintf("codex app-server: %s failed: %s", method, msg))
	}
	res := o.obj("result")
	switch method {
	case "initialize":
		if err := writeLine(w, map[string]any{"method": "initialized"}); err != nil {
			return l.fail("codex app-server: " + err.Error())
		}
		p := l.threadParams()
		method := "thread/start"
		switch {
		case l.in.Fork:
			method = "thread/fork"
			p["threadId"], p["excludeTurns"] = l.in.Conversation, true
		case l.in.Conversation != "":
			method = "thread/resume"
			p["threadId"], p["excludeTurns"] = l.in.Conversation, true
		}
		if err := l.request(w, method, p); err != nil {
			return l.fail("codex app-server: " + err.Error())
		}
	case "thread/start", "thread/resume", "thread/fork":
		id := res.obj("thread").str("id")
		if id == "" {
			return l.fail("codex app-server: " + method + " returned no thread id")
		}
		l.thread = id
		ev := harness.Event{Type: harness.EventSession, Session: id}
		if m := res.str("model"); m != "" {
			ev.Details = map[string]any{"model": m}
		}
		params := map[string]any{"threadId": id, "input": textInput(l.in.Prompt)}
		if len(l.in.Schema) > 0 {
			// TurnStartParams.outputSchema (the app-server's JSON schema):
			// the same constraint as exec --output-schema.
			params["outputSchema"] = json.RawMessage(l.in.Schema)
		}
		if err := l.request(w, "turn/start", params); err != nil {
			return append([]harness.Event{ev}, l.fail("codex app-server: "+err.Error())...)
		}
		return []harness.Event{ev}
	case "turn/start":
		l.startTurn(res.obj("turn").str("id"))
		if l.turn == "" {
			return nil
		}
		if l.interrupt {
			l.interrupt = false
			_ = l.request(w, "turn/interrupt", map[string]any{"threadId": l.thread, "turnId": l.turn})
			return nil
		}
		for _, text := range l.queued {
			if err := l.steer(w, text); err != nil {
				break
			}
		}
		l.queued = nil
	}
	return nil
}

// startTurn records the running turn's id (from turn/start's answer or
// the turn/started notification, whichever comes first).
func (l *live) startTurn(id string) {
	if id == "" || id == l.turn {
		return
	}
	l.turn = id
	l.reset(id)
	l.usageBase, l.usageTotal = nil, nil
}

// serverRequest answers a request of the app-server. outpost runs turns
// without a person to ask: approvals are declined, questions get no
// answer, anything else is "not supported".
func (l *live) serverRequest(o obj, method string, w io.Writer) []harness.Event {
	var result any
	switch method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval":
		result = map[string]any{"decision": "decline"}
	case "execCommandApproval", "applyPatchApproval":
		result = map[string]any{"decision": "denied"}
	case "item/permissions/requestApproval":
		result = map[string]any{"permissions": map[string]any{}}
	case "item/tool/requestUserInput":
		result = map[string]any{"answers": map[string]any{}}
	case "mcpServer/elicitation/request":
		result = map[string]any{"action": "decline"}
	}
	id := o.raw("id")
	if result == nil {
		_ = writeLine(w, map[string]any{"id": id, "error": map[string]any{"code": -32601, "message": "outpost does not support " + method}})
		return nil
	}
	_ = writeLine(w, map[string]any{"id": id, "result": result})
	return []harness.Event{{Type: harness.EventNotice, Kind: "permission_denied", Text: "codex asked for approval (" + method + "); outpost runs without approvals and declined",
		Details: map[string]any{"method": method}}}
}

// itemID is the event id of an app-server item: turn id + ":" + item id.
func (l *live) itemID(p obj, item string) string {
	if l.turn == "" {
		l.startTurn(p.str("turnId"))
	}
	return l.id(item)
}

func (l *live) notification(method string, p obj) []harness.Event {
	switch method {
	case "thread/started":
		if l.thread == "" {
			if id := p.obj("thread").str("id"); id != "" {
				l.thread = id
				return []harness.Event{{Type: harness.EventSession, Session: id}}
			}
		}
	case "turn/started":
		if l.turn == "" {
			l.startTurn(p.obj("turn").str("id"))
		}
	case "item/started", "item/completed":
		it := p.obj("item")
		if it != nil && l.turn == "" {
			l.startTurn(p.str("turnId"))
		}
		return l.item(it, camelCase, method == "item/completed")
	case "item/agentMessage/delta":
		if d := p.str("delta"); d != "" {
			return []harness.Event{{Type: harness.EventMessage, ID: l.itemID(p, p.str("itemId")), Text: d, Delta: true}}
		}
	case "item/reasoning/summaryTextDelta", "item/reasoning/textDelta":
		if d := p.str("delta"); d != "" {
			return []harness.Event{{Type: harness.EventReasoning, ID: l.itemID(p, p.str("itemId")), Text: d, Delta: true}}
		}
	case "thread/tokenUsage/updated":
		return l.usage(p.obj("tokenUsage"))
	case "error":
		return l.errorNotification(p)
	case "turn/completed":
		return l.completed(p.obj("turn"))
	case "configWarning", "warning", "deprecationNotice", "guardianWarning":
		text := p.str("summary")
		if text == "" {
			text = p.str("message")
		}
		if text != "" {
			return []harness.Event{{Type: harness.EventNotice, Kind: "warning", Text: text}}
		}
	case "model/rerouted":
		return []harness.Event{{Type: harness.EventNotice, Kind: "model", Text: "codex rerouted the model request", Details: map[string]any{"params": json.RawMessage(marshal(p))}}}
	}
	// thread/status/changed (idle, active, systemError),
	// account/rateLimits/updated, remoteControl/status/changed and the
	// other status notifications carry nothing a turn reports.
	return nil
}

// usageOfCamel converts the app-server's token usage (inputTokens,
// cachedInputTokens, cacheWriteInputTokens, outputTokens) like usageOf.
func usageOfCamel(o obj) (harness.Usage, bool) {
	if o == nil {
		return harness.Usage{}, false
	}
	conv := obj{}
	for from, to := range map[string]string{"inputTokens": "input_tokens", "cachedInputTokens": "cached_input_tokens", "cacheWriteInputTokens": "cache_write_input_tokens", "outputTokens": "output_tokens"} {
		if v, ok := o[from]; ok {
			conv[to] = v
		}
	}
	return usageOf(conv)
}

// usage turns thread/tokenUsage/updated into a usage event: the thread's
// total minus the total before the turn (the first notification's total
// minus its last response's usage).
func (l *live) usage(tu obj) []harness.Event {
	total, ok := usageOfCamel(tu.obj("total"))
	if !ok {
		return nil
	}
	if l.usageBase == nil {
		base := total
		if last, ok := usageOfCamel(tu.obj("last")); ok {
			base = total.Sub(last)
		} else {
			base = harness.Usage{Complete: false}
		}
		l.usageBase = &base
	}
	l.usageTotal = &total
	turn := total.Sub(*l.usageBase)
	return []harness.Event{{Type: harness.EventUsage, Usage: &turn, Details: map[string]any{"thread_usage": total}}}
}

// infoTag renders a codexErrorInfo as the tag appended to failure texts:
// "usageLimitExceeded", "httpConnectionFailed 401", ...
func infoTag(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		return name
	}
	o := parseObj(raw)
	if len(o) != 1 {
		return ""
	}
	for k := range o {
		if n, ok := o.obj(k).num("httpStatusCode"); ok {
			return k + " " + strconv.FormatInt(n, 10)
		}
		return k
	}
	return ""
}

// errorText is a TurnError's message, tagged with its codexErrorInfo.
func errorText(e obj) (string, map[string]any) {
	msg := e.str("message")
	details := map[string]any{}
	if tag := infoTag(e.raw("codexErrorInfo")); tag != "" {
		details["codex_error_info"] = tag
		if !strings.Contains(msg, "["+tag+"]") {
			msg += " [" + tag + "]"
		}
	}
	if a := e.str("additionalDetails"); a != "" {
		details["additional_details"] = a
	}
	if msg == "" {
		msg = "codex: the turn failed"
	}
	return strings.TrimSpace(msg), details
}

func (l *live) errorNotification(p obj) []harness.Event {
	e := p.obj("error")
	if p.boolean("willRetry") {
		text := e.str("message")
		if a := e.str("additionalDetails"); a != "" {
			text += " (" + a + ")"
		}
		if !isRetry(text) {
			text = retryPrefix + " " + text
		}
		ev := retryNotice(text)
		if tag := infoTag(e.raw("codexErrorInfo")); tag != "" {
			if ev.Details == nil {
				ev.Details = map[string]any{}
			}
			ev.Details["codex_error_info"] = tag
		}
		return []harness.Event{ev}
	}
	text, details := errorText(e)
	return l.failure(text, details)
}

func (l *live) completed(turn obj) []harness.Event {
	l.done = true
	switch turn.str("status") {
	case "completed":
		ev := harness.Event{Type: harness.EventFinished, Text: l.final, Stop: "completed"}
		if l.usageTotal != nil {
			u := l.usageTotal.Sub(*l.usageBase)
			ev.Usage = &u
			ev.Details = map[string]any{"thread_usage": *l.usageTotal}
		}
		return []harness.Event{ev}
	case "interrupted":
		return []harness.Event{{Type: harness.EventFailure, Kind: "interrupted", Text: "codex: the turn was interrupted"}}
	default:
		e := turn.obj("error")
		if e == nil {
			return l.failure("codex: the turn failed ("+turn.str("status")+")", nil)
		}
		text, details := errorText(e)
		return l.failure(text, details)
	}
}
