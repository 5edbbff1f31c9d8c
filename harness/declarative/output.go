package declarative

import (
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
		return rule{}, fe(field+".event", "unknown event %q (known: session, message, delta, reasoning, notice, failure, finished, usage, ignore)", r.Event)
	}
	cr := rule{typ: typ, delta: r.Event == "delta", ignore: r.Event == "ignore", kind: r.Kind}
	for _, k := range slices.Sorted(maps.Keys(r.When)) {
		fp, err := parsePath(k)
		if err != nil {
			return rule{}, fe(field+".when", "%v", err)
		}
		cr.when = append(cr.when, condition{path: fp, want: r.When[k]})
	}
	paths := []namedPath{{"text", r.Text, &cr.text}, {"session", r.Session, &cr.session}, {"id", r.ID, &cr.id}, {"stop", r.Stop, &cr.stop}}
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
	if cr.ignore && (r.Text != "" || r.Session != "" || r.Usage != nil) {
		return rule{}, fe(field+".event", "an ignore rule reads no fields")
	}
	switch typ {
	case harness.EventSession:
		if cr.session == nil {
			return rule{}, fe(field+".session", "a session rule needs the session path")
		}
	case harness.EventMessage, harness.EventReasoning, harness.EventNotice, harness.EventFailure:
		if cr.text == nil {
			return rule{}, fe(field+".text", "a %s rule needs the text path", r.Event)
		}
	case harness.EventUsage:
		if !cr.usage {
			return rule{}, fe(field+".usage", "a usage rule needs usage paths")
		}
	}
	if r.Kind != "" && typ != harness.EventNotice && typ != harness.EventFailure {
		return rule{}, fe(field+".kind", "only notices and failures have a kind")
	}
	if r.Kind == harness.KindLimit {
		return rule{}, fe(field+".kind", "%q is reserved for budgets outpost enforces", r.Kind)
	}
	return cr, nil
}

// jsonEvents decodes one JSON line with the first matching rule. It never
// panics: a line that is not a JSON object, or matches no rule, gives no
// events.
func (p *preset) jsonEvents(line []byte) []harness.Event {
	v := decodeLine(line)
	if v == nil {
		return nil
	}
	for _, r := range p.rules {
		if !slices.ContainsFunc(r.when, func(c condition) bool { return !c.holds(v) }) {
			if r.ignore {
				return nil
			}
			ev, ok := p.ruleEvent(r, v)
			if !ok {
				return nil
			}
			return []harness.Event{ev}
		}
	}
	return nil
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
	if r.usage {
		// Complete when input, output and every other counter the file
		// names were found.
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
		ev.Usage = u
	}
	if ev.Type == harness.EventNotice && ev.Kind == "" && anyMatch(p.retry, ev.Text) {
		ev.Kind = "retry"
	}
	return ev, true
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
