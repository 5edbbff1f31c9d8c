package copilot

import (
	"path"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// SessionsDir is where the CLI keeps its sessions, relative to the sandbox
// home (COPILOT_HOME is <home>/.copilot): one directory per session,
// session-state/<id>/, holding events.jsonl (the session log the CLI
// replays on --resume), workspace.yaml, checkpoints/, files/, research/
// and rewind-file-snapshots/.
const SessionsDir = HomeDir + "/session-state"

// EventsFile is the home-relative path of a session's log.
func EventsFile(native string) string { return path.Join(SessionsDir, native, "events.jsonl") }

// Storage locates Copilot sessions: every file under
// session-state/<id>/ but lock files. Restoring that directory alone into
// a fresh home is enough for `copilot --resume=<id>` (verified with the
// pinned CLI: the session index, session-store.db, is rebuilt as needed).
// Paths do not depend on the working directory, so files are restored
// where they were captured.
func Storage() *harness.Storage {
	return &harness.Storage{
		Roots: []string{SessionsDir},
		Match: Match,
	}
}

// Match reports whether rel (relative to SessionsDir) belongs to session
// native: a file under <native>/ that is not a lock (the CLI's
// .workspace-fork.lock and the like, which are only meaningful to a
// running process).
func Match(rel, native string) bool {
	return ValidSessionID(native) && kit.InSessionDir(rel, native)
}
