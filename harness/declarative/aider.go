package declarative

import (
	_ "embed"

	"github.com/outposthq/outpost/harness"
)

//go:embed aider.json
var aiderJSON []byte

// AiderJSON returns the aider preset's file: an example of the format, and
// a starting point for a variant.
func AiderJSON() []byte { return append([]byte(nil), aiderJSON...) }

// Aider returns the built-in aider preset (docs/presets/aider.md), built
// from aider's published documentation:
//
//	aider --message-file F --yes-always --no-pretty --no-stream
//	      --no-check-update --analytics-disable [--model M]
//	      --chat-history-file ~/.aider/history/ID.md
//	      --input-history-file ~/.aider/history/ID.input
//	      [--restore-chat-history] [extra args...]
//
// Outpost chooses the conversation id and keeps aider's markdown chat
// history per conversation in the sandbox's home, so a conversation is
// captured, resumed (--restore-chat-history) and forked (a copy of the
// history under a new id) like any other.
func Aider() *harness.Harness { return builtin("aider.json", aiderJSON) }
