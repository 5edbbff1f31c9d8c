package gemini

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// ProjectsDir is where the CLI keeps per-project state, relative to the
// sandbox home: ~/.gemini/tmp/<slug>/, where <slug> is the working
// directory's base name, lower-cased with every other character a dash
// (projects.json maps the directory to it). A session's chat log is
// <slug>/chats/session-<YYYY-MM-DDTHH-MM>-<first 8 of id>.jsonl; a resume
// appends to it (and leaves a stub file of its own, with no messages).
const ProjectsDir = HomeDir + "/tmp"

// Storage locates Gemini CLI sessions: the chat files of the session
// under any project, restored under the project of the turn's workdir
// (measured: a chat file copied to another home, under another
// directory's project, resumes there with its whole history).
func Storage() *harness.Storage {
	return &harness.Storage{Roots: []string{ProjectsDir}, Match: Match, Place: Place}
}

var chatRE = lazyre.New(`^[^/]+/chats/session-[0-9A-Za-z:T-]+-([0-9a-f]{8})\.jsonl?$`)

// Match reports whether rel (relative to ProjectsDir) is a chat file of
// session native. The file name holds only the id's first eight hex
// digits; a private home holds few sessions.
func Match(rel, native string) bool {
	if !ValidSessionID(native) {
		return false
	}
	m := chatRE.FindStringSubmatch(rel)
	return m != nil && strings.EqualFold(m[1], native[:8])
}

// Place moves a chat file under the project of workdir, its name's minute
// one earlier. The CLI names the file it starts for a session it loads
// (ACP's session/load) session-<this minute>-<first 8 of id>.jsonl and
// appends its header to it: a restored file of the same name, when the
// turn resumed in the minute the session began, got a second header
// and read as no session at all ("No previous sessions found for this
// project", measured on 0.61.0). A resume is never earlier than the
// session's files, so a minute back never meets the new name; the shift
// is the same for all of a session's files, so they stay apart.
func Place(rel, native, workdir string) string {
	_, rest, ok := strings.Cut(rel, "/")
	if !ok {
		return rel
	}
	if dir, name, ok := strings.Cut(rest, "/"); ok && dir == "chats" {
		rest = dir + "/" + minuteBack(name)
	}
	return Slug(workdir) + "/" + rest
}

// stampLayout is the minute in a chat file's name.
const stampLayout = "2006-01-02T15-04"

// minuteBack moves the minute in session-<minute>-<id>.jsonl one back; a
// name without one is kept.
func minuteBack(name string) string {
	stamp, ok := strings.CutPrefix(name, "session-")
	if !ok || len(stamp) < len(stampLayout)+1 || stamp[len(stampLayout)] != '-' {
		return name
	}
	t, err := time.Parse(stampLayout, stamp[:len(stampLayout)])
	if err != nil {
		return name
	}
	return "session-" + t.Add(-time.Minute).Format(stampLayout) + stamp[len(stampLayout):]
}

// Slug is the CLI's project slug for a directory that no other project
// of the home claimed first (its slugify of the base name).
func Slug(dir string) string {
	base := strings.ToLower(path.Base(path.Clean("/" + dir)))
	var b strings.Builder
	dash := false
	for _, r := range base {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == "" {
		return "project"
	}
	return s
}

// forkScript copies the parent's chat log (its largest file: a resume's
// stub is smaller than the log it appended to) to a new file of the
// child, with the parent's id replaced by the child's. $1 parent, $2
// child. The CLI then resumes the child with the parent's history
// (measured; the CLI's own --session-file fork cannot be named in a pure
// request, as the file name holds the time it was made).
const forkScript = `set -e
cd "${HOME}/.gemini/tmp"
src=$(ls -S */chats/session-*-"${1%%-*}".json* 2>/dev/null | head -n 1)
[ -n "$src" ] || { echo "gemini: no chat file of session $1" >&2; exit 3; }
# A minute back: the CLI names the file it starts for the child this
# minute, and would append its header to ours (see Place).
dst="$(dirname "$src")/session-$(date -u -d @$(($(date +%s) - 60)) +%Y-%m-%dT%H-%M)-${2%%-*}.jsonl"
sed "s/$1/$2/g" "$src" > "$dst.tmp"
mv "$dst.tmp" "$dst"
echo "$2"`

// Fork makes the child session: a copy of the parent's chat log under a
// new id, which the turn then resumes.
func Fork(ctx context.Context, parent string, run harness.Runner) (string, error) {
	if !ValidSessionID(parent) {
		return "", fmt.Errorf("gemini: %q is not a Gemini CLI session id", parent)
	}
	child, err := kit.NewUUID()
	if err != nil {
		return "", fmt.Errorf("gemini: minting a session id: %w", err)
	}
	res, err := run(ctx, harness.Command{Path: "sh", Args: []string{"-c", forkScript, "sh", parent, child}})
	if err != nil {
		return "", err
	}
	if res.Status.Code != 0 {
		return "", fmt.Errorf("gemini: fork of %s failed: %s", parent, strings.TrimSpace(string(res.Stderr)))
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}
