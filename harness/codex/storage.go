package codex

import (
	"bytes"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// SessionsRoot is where Codex keeps its rollouts, relative to the sandbox
// home: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl,
// with CODEX_HOME = ~/.codex.
const SessionsRoot = HomeDir + "/sessions"

var threadIDRE = lazyre.New(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidThreadID reports whether id is a Codex thread id (a UUID; Codex
// makes version 7 ones). Only such ids are resumed, forked and captured.
func ValidThreadID(id string) bool { return threadIDRE.MatchString(id) }

// Storage locates Codex's conversations: the rollout of a thread anywhere
// under ~/.codex/sessions (the date directories do not matter to Codex:
// a rollout resumes from any of them), plus, for a fork, the rollouts of
// its ancestors, which the fork's rollout only references
// (session_meta.history_base.thread_id) and without which it cannot be
// resumed.
func Storage() *harness.Storage {
	return &harness.Storage{
		Roots:     []string{SessionsRoot},
		Match:     matchRollout,
		Ancestors: ancestors,
	}
}

// matchRollout reports whether rel (under SessionsRoot) is the rollout of
// thread native.
func matchRollout(rel, native string) bool {
	if !ValidThreadID(native) {
		return false
	}
	base := path.Base(rel)
	return strings.HasPrefix(base, "rollout-") && strings.HasSuffix(strings.ToLower(base), "-"+strings.ToLower(native)+".jsonl")
}

// lines calls f for each non-empty line of data, with Codex's rollout
// lines being up to megabytes long. f returns false to stop.
func lines(data []byte, f func(line []byte) bool) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var l []byte
		if i < 0 {
			l, data = data, nil
		} else {
			l, data = data[:i], data[i+1:]
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if !f(l) {
			return
		}
	}
}

// base is where a fork's history continues from: its parent thread and
// the parent's first rollout ordinal that is not part of the fork.
type base struct {
	thread string
	end    int64 // -1: unknown (the whole parent)
}

// historyBases returns the parents a rollout names in its session_meta
// lines: history_base.thread_id (what Codex needs to resume it) and, for
// older layouts, forked_from_id.
func historyBases(data []byte) []base {
	var out []base
	add := func(b base) {
		if ValidThreadID(b.thread) && !slices.ContainsFunc(out, func(x base) bool { return x.thread == b.thread }) {
			out = append(out, b)
		}
	}
	lines(data, func(l []byte) bool {
		if !bytes.Contains(l, []byte(`"session_meta"`)) {
			return true
		}
		o := parseObj(l)
		if o == nil || o.str("type") != "session_meta" {
			return true
		}
		p := o.obj("payload")
		if hb := p.obj("history_base"); hb != nil {
			end, ok := hb.num("end_ordinal_exclusive")
			if !ok {
				end = -1
			}
			add(base{thread: hb.str("thread_id"), end: end})
		}
		if id := p.str("forked_from_id"); id != "" {
			end, ok := p.num("forked_from_ordinal_exclusive")
			if !ok {
				end = -1
			}
			add(base{thread: id, end: end})
		}
		return true
	})
	return out
}

// ancestors is Storage.Ancestors: the threads a captured rollout
// continues.
func ancestors(rel string, content []byte) []string {
	if !strings.HasPrefix(path.Base(rel), "rollout-") {
		return nil
	}
	var ids []string
	for _, b := range historyBases(content) {
		ids = append(ids, b.thread)
	}
	return ids
}

// record is one token_usage_record line of a rollout: the usage of one
// model response.
type record struct {
	key    string // the ordinal, or the response id
	turn   string
	usage  harness.Usage
	thread *harness.Usage // thread_token_usage: the thread's total after it
}

// records returns the token_usage_record lines of a rollout whose ordinal
// is below end (end < 0: all).
func records(data []byte, end int64) []record {
	var out []record
	lines(data, func(l []byte) bool {
		if !bytes.Contains(l, []byte(`"token_usage_record"`)) {
			return true
		}
		o := parseObj(l)
		if o == nil || o.str("type") != "token_usage_record" {
			return true
		}
		ord, hasOrd := o.num("ordinal")
		if end >= 0 && hasOrd && ord >= end {
			return true
		}
		p := o.obj("payload")
		u, ok := usageOf(p.obj("usage"))
		if !ok {
			return true
		}
		r := record{turn: p.str("turn_id"), usage: u}
		if hasOrd {
			r.key = "o" + strconv.FormatInt(ord, 10)
		} else {
			r.key = "r" + p.str("response_id")
		}
		if t, ok := usageOf(p.obj("thread_token_usage")); ok {
			r.thread = &t
		}
		out = append(out, r)
		return true
	})
	return out
}

// usageOf converts a Codex token usage object (input_tokens,
// cached_input_tokens, cache_write_input_tokens, output_tokens,
// reasoning_output_tokens) to outpost's Usage. Codex's input_tokens include
// the cached and cache-write tokens; outpost's InputTokens are the rest, as
// for every preset, so that input + cache read + cache write is the whole
// input. Reasoning tokens are part of OutputTokens.
func usageOf(o obj) (harness.Usage, bool) {
	if o == nil {
		return harness.Usage{}, false
	}
	in, okIn := o.num("input_tokens")
	out, okOut := o.num("output_tokens")
	if !okIn && !okOut {
		return harness.Usage{}, false
	}
	cached, okCached := o.num("cached_input_tokens")
	write, _ := o.num("cache_write_input_tokens")
	u := harness.Usage{
		InputTokens:      max(in-max(cached, 0)-max(write, 0), 0),
		OutputTokens:     max(out, 0),
		CacheReadTokens:  max(cached, 0),
		CacheWriteTokens: max(write, 0),
		Complete:         okIn && okOut && okCached,
	}
	return u, true
}

// rollout returns the content of thread native's rollout among files
// (home-relative paths), or nil.
func rollout(files map[string][]byte, native string) []byte {
	var best string
	for p := range files {
		rel, ok := strings.CutPrefix(p, SessionsRoot+"/")
		if ok && matchRollout(rel, native) && (best == "" || p < best) {
			best = p
		}
	}
	if best == "" {
		return nil
	}
	return files[best]
}

// TranscriptUsage is the turn's own usage: the token_usage_record lines
// of the thread's rollout that the rollout restored before the turn
// (Transcript.Before) did not hold — the difference between the thread's
// records after and before the turn. A fork's rollout holds only its own
// records, so its turn is never charged with its parent's history. Nil when
// the rollout is not among the files.
func TranscriptUsage(t harness.Transcript) *harness.Usage {
	after := rollout(t.Files, t.Native)
	if after == nil {
		return nil
	}
	seen := map[string]bool{}
	if before := rollout(t.Before, t.Native); before != nil {
		for _, r := range records(before, -1) {
			seen[r.key] = true
		}
	}
	u := harness.Usage{Complete: true}
	for _, r := range records(after, -1) {
		if !seen[r.key] {
			u = u.Add(r.usage)
		}
	}
	return &u
}

// ThreadUsage is the thread's running total as Codex keeps it (and reports
// it in turn.completed): the thread_token_usage of the rollout's last
// token_usage_record, which for a fork includes the parent's total at the
// fork. A thread without records yet has its parent's total at the fork
// point, or zero. Nil when the rollout is not among the files.
func ThreadUsage(t harness.Transcript) *harness.Usage {
	if rollout(t.Files, t.Native) == nil {
		return nil
	}
	u := threadTotal(t.Files, t.Native, -1, 0)
	return &u
}

func threadTotal(files map[string][]byte, native string, end int64, depth int) harness.Usage {
	data := rollout(files, native)
	if data == nil {
		return harness.Usage{} // an ancestor that was not captured: unknown
	}
	recs := records(data, end)
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].thread != nil {
			return *recs[i].thread
		}
	}
	if len(recs) > 0 {
		// No running totals recorded: add the records up.
		u := harness.Usage{Complete: true}
		for _, r := range recs {
			u = u.Add(r.usage)
		}
		return u
	}
	if bases := historyBases(data); len(bases) > 0 && depth < 64 && bases[0].thread != native {
		return threadTotal(files, bases[0].thread, bases[0].end, depth+1)
	}
	return harness.Usage{Complete: true}
}
