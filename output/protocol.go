package output

import (
	"encoding/json"
	"strings"
	"sync"
)

// ProtocolHandoff names the result/handoff protocol (Turn.Protocol,
// `outpost run --protocol handoff`).
const ProtocolHandoff = "handoff"

// Protocol kinds.
const (
	KindResult  = "result"
	KindHandoff = "handoff"
)

// MaxSummary bounds the summary of a fallback result (the first paragraph
// of the text).
const MaxSummary = 4 << 10

// ProtocolSchema is the built-in schema of the result/handoff protocol:
// {"result": {"summary", "changedFiles"}} or {"handoff": {"to", "task",
// "context"}}, compiled on first use.
var ProtocolSchema = sync.OnceValue(func() *Schema {
	return MustCompile(`{
  "type": "object",
  "properties": {
    "result": {
      "type": "object",
      "properties": {
        "summary": {"type": "string"},
        "changedFiles": {"type": "array", "items": {"type": "string"}}
      },
      "required": ["summary"]
    },
    "handoff": {
      "type": "object",
      "properties": {
        "to": {"type": "string", "minLength": 1},
        "task": {"type": "string", "minLength": 1},
        "context": {"type": "string"},
        "changedFiles": {"type": "array", "items": {"type": "string"}}
      },
      "required": ["to", "task"]
    }
  },
  "minProperties": 1,
  "maxProperties": 1,
  "additionalProperties": false
}`)
})

// ProtocolInstruction is the text added to the prompt of a turn that asks
// for the protocol.
const ProtocolInstruction = "End your answer with exactly one fenced ```json block: either " +
	"{\"result\": {\"summary\": \"<what you did>\", \"changedFiles\": [\"<path>\", ...]}} when the task is done, or " +
	"{\"handoff\": {\"to\": \"<agent>\", \"task\": \"<what they should do>\", \"context\": \"<what they need to know>\"}} " +
	"to hand it to another agent."

// Outcome is a parsed protocol block: what the result line reports as
// "protocol".
type Outcome struct {
	Kind string `json:"kind"` // KindResult or KindHandoff
	// Result.
	Summary string `json:"summary,omitempty"`
	// ChangedFiles are the workspace paths the turn changed, as outpost
	// computed them (never the model's claim); nil when unknown. On the
	// wire it is changed_files, and for one release also changedFiles,
	// its old name (MarshalJSON), which UnmarshalJSON still reads.
	ChangedFiles []string `json:"changed_files,omitempty"`
	// ClaimedChangedFiles are the files the agent says it changed, kept
	// beside ChangedFiles, never in place of it: the block's own
	// changedFiles (of a result or a handoff), or for a fallback the paths
	// its text mentions (MentionedPaths).
	ClaimedChangedFiles []string `json:"claimed_changed_files,omitempty"`
	// Handoff.
	To      string `json:"to,omitempty"`
	Task    string `json:"task,omitempty"`
	Context string `json:"context,omitempty"`
	// Fallback is true when the answer held no block and the result was
	// made from the text's first paragraph.
	Fallback bool `json:"fallback,omitempty"`
}

// outcomeWire is Outcome on the wire with changedFiles, the old name of
// changed_files, kept for one release (docs/output.md).
type outcomeWire struct {
	plainOutcome
	OldChangedFiles []string `json:"changedFiles,omitempty"`
}

type plainOutcome Outcome

// MarshalJSON writes changed_files and, for readers of the old name,
// changedFiles with the same paths (deprecated: removed in the next
// release).
func (o Outcome) MarshalJSON() ([]byte, error) {
	return json.Marshal(outcomeWire{plainOutcome(o), o.ChangedFiles})
}

// UnmarshalJSON reads changed_files, or changedFiles where an older
// outpost wrote only that.
func (o *Outcome) UnmarshalJSON(b []byte) error {
	var w outcomeWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*o = Outcome(w.plainOutcome)
	if o.ChangedFiles == nil {
		o.ChangedFiles = w.OldChangedFiles
	}
	return nil
}

// ProtocolAnswer is a checked protocol answer.
type ProtocolAnswer struct {
	// Outcome is set when the answer was accepted (a valid block, or the
	// fallback when there was none).
	Outcome  *Outcome
	Problems []Problem
	// Value is the block, compacted; nil for a fallback.
	Value json.RawMessage
}

// CheckProtocol parses the last fenced block of text (tagged json or
// untagged) that holds an object. A block that is not JSON or does not
// match ProtocolSchema() gives problems (repaired like a schema failure).
// Without any block the answer falls back to a result whose summary is the
// text's first paragraph, bounded (Outcome.Fallback).
func CheckProtocol(text string) ProtocolAnswer {
	if len(text) > MaxText {
		text = text[len(text)-MaxText:]
	}
	var raw []byte
	blocks := fences(text, func(info string) bool { return info == "" || isJSONInfo(info) })
	for i := len(blocks) - 1; i >= 0; i-- {
		c := strings.TrimSpace(blocks[i].content)
		if strings.HasPrefix(c, "{") || isJSONInfo(blocks[i].info) {
			raw = []byte(c)
			break
		}
	}
	if raw == nil {
		return ProtocolAnswer{Outcome: &Outcome{Kind: KindResult, Summary: FirstParagraph(text, MaxSummary), Fallback: true,
			ClaimedChangedFiles: MentionedPaths(text)}}
	}
	v, compact, p := Decode(raw)
	if p != nil {
		return ProtocolAnswer{Problems: []Problem{*p}}
	}
	if ps := ProtocolSchema().Validate(v); len(ps) > 0 {
		return ProtocolAnswer{Problems: ps}
	}
	var blk struct {
		Result *struct {
			Summary      string   `json:"summary"`
			ChangedFiles []string `json:"changedFiles"`
		} `json:"result"`
		Handoff *struct {
			To           string   `json:"to"`
			Task         string   `json:"task"`
			Context      string   `json:"context"`
			ChangedFiles []string `json:"changedFiles"`
		} `json:"handoff"`
	}
	if err := json.Unmarshal(compact, &blk); err != nil {
		return ProtocolAnswer{Problems: []Problem{{Message: "the block cannot be read: " + oneLine(err.Error(), 300)}}}
	}
	out := &Outcome{}
	if blk.Handoff != nil {
		out.Kind, out.To, out.Task, out.Context = KindHandoff, blk.Handoff.To, blk.Handoff.Task, blk.Handoff.Context
		out.ClaimedChangedFiles = blk.Handoff.ChangedFiles
	} else {
		out.Kind, out.Summary = KindResult, blk.Result.Summary
		out.ClaimedChangedFiles = blk.Result.ChangedFiles
	}
	return ProtocolAnswer{Outcome: out, Value: compact}
}

// ProtocolRepairMessage asks for a corrected protocol block.
func ProtocolRepairMessage(problems []Problem) string {
	var b strings.Builder
	b.WriteString("Your last answer's fenced JSON block does not follow the required protocol.\n")
	writeProblems(&b, problems)
	b.WriteString(ProtocolInstruction)
	return b.String()
}

// FirstParagraph returns the first paragraph of text (up to its first
// blank line, fenced blocks and leading blank lines skipped), trimmed and
// bounded to max bytes.
func FirstParagraph(text string, max int) string {
	var para []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			inFence = !inFence
			if len(para) > 0 {
				break
			}
			continue
		}
		if inFence {
			continue
		}
		if t == "" {
			if len(para) > 0 {
				break
			}
			continue
		}
		para = append(para, t)
		if len(strings.Join(para, " ")) > max {
			break
		}
	}
	return truncate(strings.ToValidUTF8(strings.Join(para, " "), "\uFFFD"), max)
}
