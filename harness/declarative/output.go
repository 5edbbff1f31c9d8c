package declarative

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

func (p *preset) compileOutput() error {
	o := p.s.Output
	if o == nil {
		return fe("output", "required")
	}
	var err error
	switch o.Format {
	case "text":
		if len(o.Events) > 0 {
			return fe("output.events", `only with format "jsonl"`)
		}
		if o.RequireFinished {
			return fe("output.require_finished", `only with format "jsonl" (a text output's end is its final message)`)
		}
		t := &textSpec{}
		if t.ignore, err = regexps("output.ignore", o.Ignore); err != nil {
			return err
		}
		if t.failure, err = regexps("output.failure", o.Failure); err != nil {
			return err
		}
		if t.notice, err = regexps("output.notice", o.Notice); err != nil {
			return err
		}
		if o.UsageLine != "" {
			if t.usage, err = regexp.Compile(o.UsageLine); err != nil {
				return fe("output.usage_line", "%v", err)
			}
			names := t.usage.SubexpNames()
			if !slices.Contains(names, "input") && !slices.Contains(names, "output") {
				return fe("output.usage_line", "needs a named group (?P<input>...) or (?P<output>...)")
			}
			for _, n := range names {
				if n != "" && !slices.Contains([]string{"input", "output", "cache_read", "cache_write"}, n) {
					return fe("output.usage_line", "unknown group %q (known: input, output, cache_read, cache_write)", n)
				}
			}
		}
		p.text = t
	case "jsonl":
		for _, f := range []struct {
			name string
			set  bool
		}{{"output.ignore", len(o.Ignore) > 0}, {"output.failure", len(o.Failure) > 0}, {"output.notice", len(o.Notice) > 0}, {"output.usage_line", o.UsageLine != ""}} {
			if f.set {
				return fe(f.name, `only with format "text"`)
			}
		}
		if len(o.Events) == 0 {
			return fe("output.events", `format "jsonl" needs at least one rule`)
		}
		for i, r := range o.Events {
			cr, err := compileRule(fmt.Sprintf("output.events[%d]", i), r)
			if err != nil {
				return err
			}
			p.rules = append(p.rules, cr)
		}
		if o.RequireFinished && !slices.ContainsFunc(p.rules, func(r rule) bool { return r.typ == harness.EventFinished }) {
			return fe("output.require_finished", "needs a rule of event \"finished\"")
		}
	case "":
		return fe("output.format", `required ("text" or "jsonl")`)
	default:
		return fe("output.format", `want "text" or "jsonl", not %q`, o.Format)
	}
	return nil
}

type namedPath struct {
	name string
	src  string
	dst  *fieldPath
}

func compileRule(field string, r EventRule) (rule, error) {
	typ, ok := eventKind[r.Event]
	if !ok {
		return rule{}, fe(field+".event", "unknown event %q (known: session, message, delta, reasoning, tool_call, tool_result, notice, failure, finished, usage, ignore)", r.Event)
	}
	cr := rule{typ: typ, delta: r.Event == "delta", ignore: r.Event == "ignore", kind: r.Kind, cont: r.Continue, sum: r.Sum}
	var err error
	for _, c := range []struct {
		name string
		m    map[string]any
		dst  *[]condition
	}{{"when", r.When, &cr.when}, {"each_when", r.EachWhen, &cr.eachWhen}, {"error_when", r.ErrorWhen, &cr.errorWhen}} {
		if *c.dst, err = conditions(field+"."+c.name, c.m); err != nil {
			return rule{}, err
		}
	}
	paths := []namedPath{{"text", r.Text, &cr.text}, {"session", r.Session, &cr.session}, {"id", r.ID, &cr.id}, {"stop", r.Stop, &cr.stop},
		{"each", r.Each, &cr.each}, {"tool", r.Tool, &cr.tool}, {"input", r.Input, &cr.input}, {"output", r.Output, &cr.output}}
	if r.Usage != nil {
		paths = append(paths, namedPath{"usage.input", r.Usage.Input, &cr.in}, namedPath{"usage.output", r.Usage.Output, &cr.out},
			namedPath{"usage.cache_read", r.Usage.CacheRead, &cr.cacheRead}, namedPath{"usage.cache_write", r.Usage.CacheWrite, &cr.cacheWr})
	}
	for _, x := range paths {
		if x.src == "" {
			continue
		}
		fp, err := parsePath(x.src)
		if err != nil {
			return rule{}, fe(field+"."+x.name, "%v", err)
		}
		*x.dst = fp
	}
	if r.Usage != nil {
		if cr.in == nil && cr.out == nil {
			return rule{}, fe(field+".usage", "needs input or output")
		}
		cr.usage = true
	}
	return cr, checkRule(field, r, cr)
}

// conditions parses a when-like map, in a stable order.
func conditions(field string, m map[string]any) ([]condition, error) {
	var out []condition
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fp, err := parsePath(k)
		if err != nil {
			return nil, fe(field, "%v", err)
		}
		out = append(out, condition{path: fp, want: m[k]})
	}
	return out, nil
}

// checkRule checks that a rule reads what its event needs, and nothing
// its event cannot carry.
func checkRule(field string, r EventRule, cr rule) error {
	if cr.ignore && (r.Text != "" || r.Session != "" || r.Usage != nil || r.Each != "" || r.Tool != "") {
		return fe(field+".event", "an ignore rule reads no fields")
	}
	if len(r.EachWhen) > 0 && r.Each == "" {
		return fe(field+".each_when", "needs each")
	}
	tool := cr.typ == harness.EventToolCall || cr.typ == harness.EventToolResult
	if !tool && (r.Tool != "" || r.Input != "" || r.Output != "" || len(r.ErrorWhen) > 0) {
		return fe(field+".event", "only tool_call and tool_result rules read tool, input, output and error_when")
	}
	if r.Sum && !cr.usage {
		return fe(field+".sum", "needs usage paths")
	}
	switch cr.typ {
	case harness.EventSession:
		if cr.session == nil {
			return fe(field+".session", "a session rule needs the session path")
		}
	case harness.EventMessage, harness.EventReasoning, harness.EventNotice, harness.EventFailure:
		if cr.text == nil {
			return fe(field+".text", "a %s rule needs the text path", r.Event)
		}
	case harness.EventToolCall:
		if cr.tool == nil {
			return fe(field+".tool", "a tool_call rule needs the tool name path")
		}
	case harness.EventToolResult:
		if cr.id == nil && cr.tool == nil {
			return fe(field+".id", "a tool_result rule needs the call's id path or the tool name path")
		}
	case harness.EventUsage:
		if !cr.usage {
			return fe(field+".usage", "a usage rule needs usage paths")
		}
	}
	if r.Kind != "" && cr.typ != harness.EventNotice && cr.typ != harness.EventFailure {
		return fe(field+".kind", "only notices and failures have a kind")
	}
	if r.Kind == harness.KindLimit {
		return fe(field+".kind", "%q is reserved for budgets outpost enforces", r.Kind)
	}
	return nil
}

// maxEach bounds the events one rule gives for one line.
const maxEach = 256

// jsonEvents decodes one JSON line with the first matching rule (and the
// rules after it while a matching rule says continue). It never panics: a
// line that is not a JSON object, or matches no rule, gives no events.
func (p *preset) jsonEvents(line []byte) []harness.Event {
	return p.decodeJSON(line, nil)
}

// jsonDecoder is the decoder of a file with summing rules: it keeps the
// turn's running usage total.
func (p *preset) jsonDecoder() func([]byte) []harness.Event {
	total := &harness.Usage{Complete: true}
	return func(line []byte) []harness.Event {
		if line == nil {
			return nil
		}
		return p.decodeJSON(line, total)
	}
}

func (p *preset) decodeJSON(line []byte, total *harness.Usage) []harness.Event {
	v := decodeLine(line)
	if v == nil {
		return nil
	}
	var evs []harness.Event
	for _, r := range p.rules {
		if !allHold(r.when, v) {
			continue
		}
		if r.ignore {
			return evs
		}
		items := []any{v}
		if r.each != nil {
			items = r.each.values(v)
			if len(items) == 1 {
				if a, ok := items[0].([]any); ok {
					items = a
				}
			}
		}
		for i, x := range items {
			if i == maxEach {
				break
			}
			if !allHold(r.eachWhen, x) {
				continue
			}
			if ev, ok := p.ruleEvent(r, x); ok {
				evs = append(evs, sumUsage(r, ev, total))
			}
		}
		if !r.cont {
			break
		}
	}
	return evs
}

func allHold(cs []condition, v any) bool {
	return !slices.ContainsFunc(cs, func(c condition) bool { return !c.holds(v) })
}

// sumUsage adds a summing rule's usage to the running total and reports
// the total instead.
func sumUsage(r rule, ev harness.Event, total *harness.Usage) harness.Event {
	if !r.sum || ev.Usage == nil || total == nil {
		return ev
	}
	*total = total.Add(*ev.Usage)
	u := *total
	ev.Usage = &u
	return ev
}

// ruleEvent builds a rule's event; ok is false when the line lacks what
// the event is about (a session rule without an id, a message without text).
func (p *preset) ruleEvent(r rule, v any) (ev harness.Event, ok bool) {
	ev = harness.Event{Type: r.typ, Delta: r.delta, Kind: r.kind}
	ev.Text, ok = r.text.text(v)
	switch r.typ {
	case harness.EventMessage, harness.EventReasoning, harness.EventNotice, harness.EventFailure:
		if !ok {
			return ev, false
		}
	}
	ev.Text = strings.ToValidUTF8(ev.Text, "\uFFFD")
	if s, ok := r.session.text(v); ok && ValidSessionID(s) {
		ev.Session = s
	} else if r.typ == harness.EventSession {
		return ev, false
	}
	ev.ID, _ = r.id.text(v)
	ev.Stop, _ = r.stop.text(v)
	if r.typ == harness.EventToolCall || r.typ == harness.EventToolResult {
		if ev.Tool, ok = toolOf(r, v, ev.ID); !ok {
			return ev, false
		}
		ev.ID = ""
	}
	if r.usage {
		ev.Usage = usageOf(r, v)
	}
	if ev.Type == harness.EventNotice && ev.Kind == "" && anyMatch(p.retry, ev.Text) {
		ev.Kind = "retry"
	}
	return ev, true
}

// toolOf reads a tool call or result; ok is false for a call without a
// name or a result without its call's id or name.
func toolOf(r rule, v any, id string) (*harness.Tool, bool) {
	t := &harness.Tool{ID: strings.ToValidUTF8(id, "\uFFFD")}
	t.Name, _ = r.tool.text(v)
	t.Name = strings.ToValidUTF8(t.Name, "\uFFFD")
	if r.typ == harness.EventToolCall && t.Name == "" || r.typ == harness.EventToolResult && t.ID == "" && t.Name == "" {
		return nil, false
	}
	if r.input != nil {
		if vals := r.input.values(v); len(vals) > 0 {
			if b, err := json.Marshal(vals[0]); err == nil {
				t.Input = b
			}
		}
	}
	if r.typ == harness.EventToolResult {
		out, _ := r.output.text(v)
		t.Output = strings.ToValidUTF8(out, "\uFFFD")
		t.Error = len(r.errorWhen) > 0 && allHold(r.errorWhen, v)
	}
	return t, true
}

// usageOf reads a rule's counters. Complete when input, output and every
// other counter the file names were found.
func usageOf(r rule, v any) *harness.Usage {
	u := &harness.Usage{Complete: r.in != nil && r.out != nil}
	for _, c := range []struct {
		p   fieldPath
		dst *int64
	}{{r.in, &u.InputTokens}, {r.out, &u.OutputTokens}, {r.cacheRead, &u.CacheReadTokens}, {r.cacheWr, &u.CacheWriteTokens}} {
		if c.p == nil {
			continue // the CLI has no such counter
		}
		n, ok := c.p.number(v)
		if !ok {
			u.Complete = false
			continue
		}
		*c.dst = n
	}
	return u
}

// ansiRE matches terminal escape sequences, removed from text lines.
var ansiRE = lazyre.New(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[@-Z\\-_]`)

// textDecoder decodes a plain-text output: every line that no pattern
// claims is a delta of one message, and at the end (a nil line) the whole
// of them is the finished event's text. Failure lines directly followed by
// a retry line are the retry's notices, not failures: they are held until
// the next line says which.
func (p *preset) textDecoder() func([]byte) []harness.Event {
	t := p.text
	var answer strings.Builder
	var usage *harness.Usage
	var pending []string // failure lines not yet known to be terminal
	ended := false
	flush := func(evs []harness.Event) []harness.Event {
		for _, f := range pending {
			evs = append(evs, harness.Event{Type: harness.EventFailure, Text: f})
		}
		pending = nil
		return evs
	}
	return func(line []byte) []harness.Event {
		if line == nil {
			if ended {
				return nil
			}
			ended = true
			ev := harness.Event{Type: harness.EventFinished, Text: strings.TrimRight(answer.String(), "\n"), Stop: "end_turn"}
			if usage != nil {
				u := *usage
				ev.Usage = &u
			}
			return append(flush(nil), ev)
		}
		s := strings.TrimRight(string(line), "\r")
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		s = ansiRE.ReplaceAllString(s, "")
		if anyMatch(p.retry, s) {
			// One notice: the error lines retried, then the retry line.
			text := strings.Join(append(pending, s), "\n")
			pending = nil
			return []harness.Event{{Type: harness.EventNotice, Kind: "retry", Text: text}}
		}
		if anyMatch(t.failure, s) {
			if len(pending) < 64 {
				pending = append(pending, s)
			}
			return nil
		}
		evs := flush(nil)
		switch {
		case t.usage != nil && t.usage.MatchString(s):
			u := textUsage(t.usage, s)
			if usage == nil {
				usage = &u
			} else {
				sum := usage.Add(u)
				usage = &sum
			}
			cp := *usage
			return append(evs, harness.Event{Type: harness.EventUsage, Usage: &cp})
		case anyMatch(t.notice, s):
			return append(evs, harness.Event{Type: harness.EventNotice, Text: s})
		case anyMatch(t.ignore, s):
			return evs
		}
		if answer.Len() == 0 && strings.TrimSpace(s) == "" {
			return evs
		}
		answer.WriteString(s)
		answer.WriteByte('\n')
		return append(evs, harness.Event{Type: harness.EventMessage, ID: "m1", Text: s + "\n", Delta: true})
	}
}

// textUsage reads the named groups of a usage line. Rounded figures
// ("2.5k") and absent groups make the usage incomplete.
func textUsage(re *regexp.Regexp, s string) harness.Usage {
	m := re.FindStringSubmatch(s)
	u := harness.Usage{Complete: true}
	dst := map[string]*int64{"input": &u.InputTokens, "output": &u.OutputTokens, "cache_read": &u.CacheReadTokens, "cache_write": &u.CacheWriteTokens}
	found := map[string]bool{}
	for i, name := range re.SubexpNames() {
		if name == "" || m[i] == "" {
			continue
		}
		n, exact, ok := tokenCount(m[i])
		if !ok {
			continue
		}
		*dst[name] = n
		found[name] = true
		if !exact {
			u.Complete = false
		}
	}
	if len(found) < 4 {
		u.Complete = false
	}
	return u
}

// tokenCount reads "1234", "1,234", "2.5k" or "1.2M".
func tokenCount(s string) (n int64, exact, ok bool) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1e3, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1e6, s[:len(s)-1]
	}
	if mult == 1 {
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil, err == nil && v >= 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f*mult > math.MaxInt64/2 || math.IsNaN(f) {
		return 0, false, false
	}
	return int64(f * mult), false, true
}
