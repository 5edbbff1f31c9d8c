package copilot

import (
	"bytes"

	"github.com/outposthq/outpost/harness"
)

// Token usage. The CLI prints no token counts on standard output; it
// records one session.usage_record per model call in the session log,
// ~/.copilot/session-state/<id>/events.jsonl, which also marks where each
// run of the CLI began (session.start, then session.resume for every
// --resume). The --usage-output-file and the session.shutdown record are
// cumulative over the session, so they are not used.
//
// Copilot's inputTokens include the cached and cache-write tokens (measured
// with BYOK against OpenAI-style and Anthropic-style providers: an
// Anthropic answer of input 50, cache read 30, cache write 20 is recorded
// as inputTokens 100); outpost's InputTokens are the rest, so the four
// counters add up to the tokens billed.

// usageScript prints, within a bound, the lines of the session log that
// delimit runs and record usage: every line of the log starts with its
// "type" field, so a line whose content merely mentions a record type
// (tool output, a prompt) does not match. $1 is the session id.
const usageScript = `f="${COPILOT_HOME:-$HOME/.copilot}/session-state/$1/events.jsonl"
[ -f "$f" ] || exit 3
grep -E '^[{]"type":"session[.](start|resume|usage_record)"' "$f" | tail -c 1000000`

// UsageCommand is the bounded read run in the sandbox after the turn
// (usage mode session): the session log's run markers and usage records,
// at most 1 MB of them (the latest), with sh, grep and tail. Nil for an id
// that is not a session id.
func UsageCommand(native string) *harness.Command {
	if !ValidSessionID(native) {
		return nil
	}
	return &harness.Command{Path: "sh", Args: []string{"-c", usageScript, "sh", native}}
}

// UsageResult sums the usage records after the last run marker in the
// output of UsageCommand: the usage of the turn that just ended, every
// model call of it (sub-agents' included). A turn that made no successful
// model call used nothing. Complete is false when a record lacks a counter
// or when the bound cut the start of the turn off. Nil when the output
// holds neither a marker nor a record.
func UsageResult(stdout []byte) *harness.Usage {
	var u harness.Usage
	seen, marker := false, false
	for _, line := range bytes.Split(stdout, []byte("\n")) {
		o := parseObj(line)
		if o == nil {
			continue
		}
		switch o.Str("type") {
		case "session.start", "session.resume":
			u, seen, marker = harness.Usage{Complete: true}, true, true
		case "session.usage_record":
			r, ok := recordUsage(o.Obj("data").Obj("usage"))
			if !ok {
				continue
			}
			if !seen {
				u, seen = harness.Usage{Complete: true}, true
			}
			u = u.Add(r)
		}
	}
	if !seen {
		return nil
	}
	if !marker {
		u.Complete = false
	}
	return &u
}

// TranscriptUsage is the usage of the turn read from the captured session
// log: its usage records that were not in the log restored before the turn
// (t.Before), by event id. It replaces UsageResult's figure whenever the
// conversation is captured. Nil when the capture holds no session log for
// t.Native.
func TranscriptUsage(t harness.Transcript) *harness.Usage {
	log, ok := t.Files[EventsFile(t.Native)]
	if !ok {
		return nil
	}
	before := map[string]bool{}
	for _, content := range t.Before {
		eachRecord(content, func(id string, _ harness.Usage, _ bool) { before[id] = true })
	}
	u := harness.Usage{Complete: true}
	eachRecord(log, func(id string, r harness.Usage, ok bool) {
		if id != "" && before[id] {
			return
		}
		if !ok {
			u.Complete = false
			return
		}
		u = u.Add(r)
	})
	return &u
}

// ThreadUsage is the running total of the whole session: every usage
// record in the captured session log.
func ThreadUsage(t harness.Transcript) *harness.Usage {
	log, ok := t.Files[EventsFile(t.Native)]
	if !ok {
		return nil
	}
	u := harness.Usage{Complete: true}
	eachRecord(log, func(_ string, r harness.Usage, ok bool) {
		if !ok {
			u.Complete = false
			return
		}
		u = u.Add(r)
	})
	return &u
}

var recordPrefix = []byte(`{"type":"session.usage_record"`)

// eachRecord calls f for every session.usage_record line of a session log
// with its event id and usage (ok false when the record has no counters).
// Other lines, the largest of the log, are not decoded.
func eachRecord(log []byte, f func(id string, u harness.Usage, ok bool)) {
	for len(log) > 0 {
		line := log
		if i := bytes.IndexByte(log, '\n'); i >= 0 {
			line, log = log[:i], log[i+1:]
		} else {
			log = nil
		}
		if !bytes.HasPrefix(line, recordPrefix) {
			continue
		}
		o := parseObj(line)
		if o == nil || o.Str("type") != "session.usage_record" {
			continue
		}
		u, ok := recordUsage(o.Obj("data").Obj("usage"))
		f(o.Str("id"), u, ok)
	}
}

// recordUsage converts one call's counters (a usage record or an
// assistant.usage line). ok is false when neither input nor output tokens
// are present; Complete is false when any of the four counters is missing.
func recordUsage(o obj) (harness.Usage, bool) {
	if o == nil {
		return harness.Usage{}, false
	}
	in, okIn := o.Num("inputTokens")
	out, okOut := o.Num("outputTokens")
	cr, okCR := o.Num("cacheReadTokens")
	cw, okCW := o.Num("cacheWriteTokens")
	if !okIn && !okOut {
		return harness.Usage{}, false
	}
	in, out, cr, cw = max(in, 0), max(out, 0), max(cr, 0), max(cw, 0)
	return harness.Usage{
		InputTokens:      max(in-cr-cw, 0),
		OutputTokens:     out,
		CacheReadTokens:  cr,
		CacheWriteTokens: cw,
		Complete:         okIn && okOut && okCR && okCW,
	}, true
}
