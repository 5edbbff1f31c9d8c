package echo

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// turnState is one user turn as it goes.
type turnState struct {
	n         int   // the turn's 1-based number in the conversation
	histWords int64 // the history's words: the usage's cache read
	path      string
	history   []record
	recs      []record // the session as written
	prompt    string
	extra     []string // lines added to the reply
}

// turn runs one user turn. done reports that the process must end now
// (a failure directive), with the exit code.
func (a *agent) turn(dir, id, parent string, history []record, prompt string, msgs <-chan string) (int, bool) {
	t, err := a.begin(dir, id, parent, history, prompt)
	if err != nil {
		fmt.Fprintln(a.stderr, "echo: saving session:", err)
		return 5, true
	}
	if code, stop := a.failure(prompt); stop {
		return code, true
	}
	a.effects(t)
	a.slow(t, msgs)
	a.files(t)
	reply := t.reply()
	a.emit(line{Type: "text", ID: "m1", Text: reply})
	a.flush()

	t.recs = append(t.recs, record{Role: "assistant", Text: reply})
	if err := writeSession(t.path, t.recs); err != nil {
		fmt.Fprintln(a.stderr, "echo: saving session:", err)
		return 5, true
	}
	if strings.Contains(prompt, "#nofinish") {
		return 0, true
	}
	a.emit(line{Type: "done", Text: reply, Usage: &nativeUsage{Input: words(prompt), Output: words(reply), CacheRead: t.histWords}})
	a.flush()
	return 0, false
}

// begin counts the history and, like the real CLIs, puts the user's
// message on disk before the agent works, so a turn stopped midway can be
// resumed; then it says which session and turn this is.
func (a *agent) begin(dir, id, parent string, history []record, prompt string) (*turnState, error) {
	t := &turnState{n: 1, path: sessionPath(dir, id), history: history, prompt: prompt}
	for _, r := range history {
		if r.Role == "user" {
			t.n++
		}
		if r.Role == "user" || r.Role == "assistant" {
			t.histWords += words(r.Text)
		}
	}
	t.recs = history
	if len(t.recs) == 0 || parent != "" {
		t.recs = append([]record{{Role: "meta", ID: id, Parent: parent}}, withoutMeta(history)...)
	}
	t.recs = append(t.recs, record{Role: "user", Text: prompt})
	if err := writeSession(t.path, t.recs); err != nil {
		return nil, err
	}
	a.emit(line{Type: "init", Session: id, Parent: parent, Model: a.model, Turn: t.n})
	a.flush()
	return t, nil
}

// failure runs the directives that end the process: #quota, #outage,
// #crash, #hang, #retryforever. stop is false when the prompt has none.
func (a *agent) failure(prompt string) (code int, stop bool) {
	switch {
	case strings.Contains(prompt, "#quota"):
		reset := time.Now().UTC().Add(time.Hour).Truncate(time.Second).Format(time.RFC3339)
		fmt.Fprintf(a.stderr, "echo: usage limit reached for this key; it resets at %s\n", reset)
		return 1, true
	case strings.Contains(prompt, "#outage"):
		fmt.Fprintln(a.stderr, "echo: model service unavailable: 503 overloaded (connection reset by peer)")
		return 1, true
	case strings.Contains(prompt, "#crash"):
		fmt.Fprintln(a.stderr, "echo: simulated crash")
		return 3, true
	case strings.Contains(prompt, "#hang"):
		a.flush()
		// Sleep rather than block on nothing: with no timer pending, the
		// Go runtime may call a lone blocked goroutine a deadlock and exit.
		for {
			time.Sleep(time.Hour)
		}
	case strings.Contains(prompt, "#retryforever"):
		// Like a CLI with no network: retry notices and nothing else.
		for attempt := 1; ; attempt++ {
			a.emit(line{Type: "retry", Attempt: attempt, Text: "Reconnecting... waiting for network, retrying in 20ms"})
			a.flush()
			time.Sleep(20 * time.Millisecond)
		}
	}
	return 0, false
}

// badLines are the #badlines directive's output: a truncated JSON line, a
// line that is not JSON, invalid UTF-8 and an unknown type.
const badLines = "{\"type\":\"text\",\"text\":\n" +
	"not json at all\n" +
	"{\"type\":\"text\",\"text\":\"\xff\xfe\"}\n" +
	"{\"type\":\"from-the-future\",\"x\":1}\n"

// effects runs the directives that add lines to the output or the reply:
// #retry, #tool, #badlines, #env, #args, #leak, #big.
func (a *agent) effects(t *turnState) {
	p := t.prompt
	if strings.Contains(p, "#retry") {
		fmt.Fprintln(a.stderr, "echo: rate limited (429), retrying in 10ms (attempt 1 of 3)")
		a.emit(line{Type: "retry", Attempt: 1, Text: "rate limited (429), retrying in 10ms (attempt 1 of 3)"})
		a.flush()
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(p, "#tool") {
		a.emit(line{Type: "tool_call", ID: "tool-1", Name: "shell", Input: json.RawMessage(`{"command":"echo hi"}`)})
		a.emit(line{Type: "tool_result", ID: "tool-1", Output: "hi\n"})
	}
	if strings.Contains(p, "#badlines") {
		a.out.WriteString(badLines)
	}
	if name, ok := argument(p, "#env "); ok {
		if v, ok := os.LookupEnv(name); ok {
			t.extra = append(t.extra, fmt.Sprintf("%s is set (%d bytes)", name, len(v)))
		} else {
			t.extra = append(t.extra, name+" is not set")
		}
	}
	if strings.Contains(p, "#args") {
		args := "(none)"
		if len(a.passed) > 0 {
			args = strings.Join(a.passed, " ")
		}
		t.extra = append(t.extra, "args: "+args)
	}
	if name, ok := argument(p, "#leak "); ok {
		v := os.Getenv(name)
		t.extra = append(t.extra, name+"="+v)
		fmt.Fprintf(a.stderr, "echo: debug %s=%s\n", name, v)
	}
	if strings.Contains(p, "#big") {
		a.emit(line{Type: "text", Text: strings.Repeat("x", 8<<20)})
	}
}

// slow runs #slow[=N]: N deltas 50 ms apart; a live message that arrives
// meanwhile is seen within this turn, which then wraps up.
func (a *agent) slow(t *turnState, msgs <-chan string) {
	if !strings.Contains(t.prompt, "#slow") {
		return
	}
	steps := 100
	if v, ok := argument(t.prompt, "#slow="); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			steps = n
		}
	}
	for i := 0; i < steps; i++ {
		a.emit(line{Type: "delta", ID: "m1", Text: fmt.Sprintf("step %d ", i+1)})
		a.flush()
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			a.emit(line{Type: "steer", Mode: "injected", Text: m})
			t.extra = append(t.extra, "steered: "+m)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// reply is the turn's final text, with the extra lines and the block the
// JSON directives ask for.
func (t *turnState) reply() string {
	reply := fmt.Sprintf("echo: %s (turn %d)", t.prompt, t.n)
	block, ok := jsonAnswer(t.history, t.prompt, t.n)
	if ok {
		// The prompt on a line of its own: one that ends with a fence
		// (an instruction restating a schema) must not swallow the block.
		reply = fmt.Sprintf("echo (turn %d):\n%s", t.n, t.prompt)
	}
	if len(t.extra) > 0 {
		reply += "\n" + strings.Join(t.extra, "\n")
	}
	if ok {
		reply += "\n\n```json\n" + block + "\n```"
	}
	return reply
}

// jsonAnswer is the structured answer the JSON directives ask for, read
// from the whole conversation (a repair turn's prompt holds none):
// #json=<value> (to the end of its line) answers value; #badjson answers a
// block that is not JSON; #json-after=N answers a broken block for the
// first N turns, then the #json value (default {"ok":true}).
func jsonAnswer(history []record, prompt string, turn int) (string, bool) {
	all := prompt
	for _, r := range history {
		if r.Role == "user" {
			all = r.Text + "\n" + all
		}
	}
	value, hasValue := "", false
	if i := strings.Index(all, "#json="); i >= 0 {
		value, _, _ = strings.Cut(all[i+len("#json="):], "\n")
		value, hasValue = strings.TrimSpace(value), true
	}
	after := -1
	if v, ok := argument(all, "#json-after="); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			after = n
		}
	}
	switch {
	case strings.Contains(all, "#badjson"), after >= 0 && turn <= after:
		return `{"broken": `, true
	case after >= 0 && !hasValue:
		return `{"ok":true}`, true
	}
	return value, hasValue
}

// argument is the word that follows the first directive of s, and whether
// s has the directive.
func argument(s, directive string) (string, bool) {
	i := strings.Index(s, directive)
	if i < 0 {
		return "", false
	}
	return firstWord(s[i+len(directive):]), true
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func words(s string) int64 { return int64(len(strings.Fields(s))) }
