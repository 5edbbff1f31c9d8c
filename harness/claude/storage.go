package claude

import (
	"path"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// ProjectsDir is where the CLI keeps its sessions, relative to the home:
// ~/.claude/projects/<slug>/<session id>.jsonl, plus a directory
// <slug>/<session id>/ for the session's side files (subagent transcripts,
// large tool results) when it has any.
const ProjectsDir = ".claude/projects"

// MaxSlugLen is the longest slug the CLI uses as is; longer ones are cut
// to this length and suffixed with a hash outpost does not compute.
const MaxSlugLen = 200

// Storage locates Claude Code sessions (see ProjectsDir). A session is
// matched by its id in any project directory; restoring places it under
// the slug of the new working directory, so `claude --resume` finds it on
// any sandbox, from any working directory. Forks copy their parent's history
// into their own file, so no ancestors are needed.
func Storage() *harness.Storage {
	return &harness.Storage{
		Roots: []string{ProjectsDir},
		Match: Match,
		Place: Place,
	}
}

// Match reports whether rel (relative to ProjectsDir) belongs to session
// native: <slug>/<native>.jsonl, or a file under <slug>/<native>/.
func Match(rel, native string) bool {
	if !ValidSessionID(native) {
		return false
	}
	slug, rest, ok := strings.Cut(rel, "/")
	if !ok || slug == "" || slug == "." || slug == ".." {
		return false
	}
	if rest == native+".jsonl" {
		return true
	}
	sub, ok := strings.CutPrefix(rest, native+"/")
	return ok && sub != "" && harness.RelativePath(sub)
}

// Place moves a captured file from its project directory into the one of
// workdir, keeping the rest of its path. When the slug cannot be computed
// here (a relative workdir, or one longer than MaxSlugLen once slugged) the
// file stays where it was captured: the CLI also finds a session by id in
// another project directory and appends to it there.
//
// The CLI slugs the real path of its working directory (symbolic links
// resolved); Place cannot resolve links inside the sandbox, so a workdir
// reached through a link gets the link's slug, which the CLI then finds by
// id as well.
func Place(rel, native, workdir string) string {
	_, rest, ok := strings.Cut(rel, "/")
	if !ok || !path.IsAbs(workdir) {
		return rel
	}
	slug := Slug(workdir)
	if slug == "" || len(slug) > MaxSlugLen {
		return rel
	}
	return slug + "/" + rest
}

// Slug is the CLI's project directory name for an absolute directory: the
// path with every character but ASCII letters and digits replaced by "-"
// (one per UTF-16 code unit, as the CLI's JavaScript does: one for most
// characters, two for those outside the Basic Multilingual Plane). It does not resolve symbolic links
// and does not shorten long paths (see Place).
func Slug(dir string) string {
	dir = path.Clean(dir)
	var b strings.Builder
	b.Grow(len(dir))
	for _, r := range dir {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if r > 0xFFFF {
			b.WriteString("--")
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}
