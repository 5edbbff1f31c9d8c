package antigravity

import (
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// BrainDir is where agy keeps its conversations, relative to the home:
// brain/<conversation id>/, with the transcript at
// .system_generated/logs/transcript.jsonl (third-party reports, 1.2.x;
// never verified here, and the official changelog says conversations moved
// to SQLite in 1.0.4 — see docs/presets/antigravity.md).
const BrainDir = StateDir + "/brain"

// Storage locates agy conversations: every file under
// brain/<conversation id>/. A resume whose files agy does not find is not
// silent: agy starts a new conversation, and the decoder fails the turn
// (resume_lost).
func Storage() *harness.Storage {
	return &harness.Storage{Roots: []string{BrainDir}, Match: Match}
}

// Match reports whether rel (relative to BrainDir) belongs to conversation
// native: a file under <native>/ that is not a lock.
func Match(rel, native string) bool {
	return ValidConversationID(native) && kit.InSessionDir(rel, native)
}
