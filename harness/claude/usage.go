package claude

import (
	"bytes"
	"maps"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// TranscriptUsage is the token usage of the turn read from the captured
// session files: the final usage of every API message in the session's
// transcript (the assistant lines; the CLI repeats a message's usage on
// each of its content-block lines, so messages are counted once, by
// message id), less the messages already in the files restored before the
// turn (t.Before: a resumed conversation's earlier turns, a fork's copied
// history). It returns nil when the transcript holds no session file for
// t.Native, so the usage of the result events stands.
//
// The result line's total_cost_usd and modelUsage are cumulative over the
// session (a fork inherits its parent's), and the stream's assistant lines
// carry only the usage of message_start: neither is used.
func TranscriptUsage(t harness.Transcript) *harness.Usage {
	seen := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(t.Before)) {
		if strings.HasSuffix(p, ".jsonl") {
			eachMessage(t.Before[p], func(id string, _ obj) { seen[id] = true })
		}
	}
	found := false
	u := harness.Usage{Complete: true}
	for _, p := range slices.Sorted(maps.Keys(t.Files)) {
		rel, ok := strings.CutPrefix(p, ProjectsDir+"/")
		if !ok || !strings.HasSuffix(p, ".jsonl") || !Match(rel, t.Native) {
			continue
		}
		found = true
		eachMessage(t.Files[p], func(id string, usage obj) {
			if seen[id] {
				return
			}
			seen[id] = true
			mu, ok := Usage(usage)
			if !ok {
				u.Complete = false
				return
			}
			complete := u.Complete && mu.Complete
			u = u.Add(mu)
			u.Complete = complete
		})
	}
	if !found {
		return nil
	}
	return &u
}

// eachMessage calls f once per assistant line of a session file with the
// line's API message id (else its request id, else its uuid) and usage.
func eachMessage(data []byte, f func(id string, usage obj)) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if !bytes.Contains(line, []byte(`"assistant"`)) {
			continue // most lines, and the largest, are something else
		}
		o := parseObj(line)
		if o == nil || o.Str("type") != "assistant" {
			continue
		}
		msg := o.Obj("message")
		if msg == nil {
			continue
		}
		id := msg.Str("id")
		if id == "" {
			id = o.Str("requestId")
		}
		if id == "" {
			id = o.Str("uuid")
		}
		if id == "" {
			continue
		}
		f(id, msg.Obj("usage"))
	}
}

// ThreadUsage is the running total the CLI keeps for the whole session,
// read from the last cost-state line of its transcript: every turn so far,
// including those of earlier processes and, for a fork, the history it
// inherited (summed over the models used). Without a cost-state line it is
// the sum over every API message of the transcript, deduped by message id.
// Nil when the transcript holds no session file for t.Native.
func ThreadUsage(t harness.Transcript) *harness.Usage {
	var main []byte
	found := false
	for _, p := range slices.Sorted(maps.Keys(t.Files)) {
		rel, ok := strings.CutPrefix(p, ProjectsDir+"/")
		if ok && Match(rel, t.Native) && strings.Count(rel, "/") == 1 {
			main, found = t.Files[p], true
		}
	}
	if !found {
		return nil
	}
	if u, ok := lastCostState(main); ok {
		return &u
	}
	return TranscriptUsage(harness.Transcript{Native: t.Native, Files: t.Files})
}

// lastCostState reads the totals of the last cost-state line of a session
// file.
func lastCostState(data []byte) (harness.Usage, bool) {
	for len(data) > 0 {
		data = bytes.TrimRight(data, "\n")
		line := data
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			line, data = data[i+1:], data[:i]
		} else {
			data = nil
		}
		if !bytes.Contains(line, []byte(`"cost-state"`)) {
			continue
		}
		o := parseObj(line)
		if o == nil || o.Str("type") != "cost-state" {
			continue
		}
		models := o.Obj("modelUsage")
		if models == nil {
			continue
		}
		u := harness.Usage{Complete: true}
		for _, name := range slices.Sorted(maps.Keys(models)) {
			m := models.Obj(name)
			in, ok1 := m.Num("inputTokens")
			out, ok2 := m.Num("outputTokens")
			cr, ok3 := m.Num("cacheReadInputTokens")
			cw, ok4 := m.Num("cacheCreationInputTokens")
			complete := u.Complete && ok1 && ok2 && ok3 && ok4
			u = u.Add(harness.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw, Complete: true})
			u.Complete = complete
		}
		return u, true
	}
	return harness.Usage{}, false
}
