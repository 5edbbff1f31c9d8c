package output

import (
	"sort"
	"strings"

	"github.com/outposthq/outpost/snapshot"
)

// Operations of a changed file.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)

// DefaultChangedFilesLimit bounds a workspace snapshot by file count.
const DefaultChangedFilesLimit = 20000

// ChangedFile is one workspace path a turn changed.
type ChangedFile struct {
	Path      string `json:"path"`
	Operation string `json:"operation"` // created, modified or deleted
}

// Changes are the files a turn changed, as outpost computed them.
type Changes struct {
	Files []ChangedFile `json:"files"`
	// Complete is false when a snapshot stopped at its bound: paths past
	// it are not reported.
	Complete bool `json:"complete"`
}

// Paths returns the changed paths, in order.
func (c *Changes) Paths() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.Files))
	for _, f := range c.Files {
		out = append(out, f.Path)
	}
	return out
}

// Diff compares two snapshots of one workspace. A file is modified when
// its size, modification time or mode changed (a type change is one).
// When a snapshot is incomplete only the paths both walks covered are
// compared, and Complete is false.
func Diff(before, after snapshot.Snapshot) *Changes {
	covered := func(p string) bool { return true }
	complete := before.Complete && after.Complete
	if !complete {
		last := before.Last
		if before.Complete || (!after.Complete && walkLess(after.Last, last)) {
			last = after.Last
		}
		covered = func(p string) bool { return !walkLess(last, p) }
	}
	c := &Changes{Files: []ChangedFile{}, Complete: complete}
	for p, a := range after.Files {
		if !covered(p) {
			continue
		}
		b, ok := before.Files[p]
		switch {
		case !ok:
			c.Files = append(c.Files, ChangedFile{Path: p, Operation: Created})
		case a != b:
			c.Files = append(c.Files, ChangedFile{Path: p, Operation: Modified})
		}
	}
	for p := range before.Files {
		if _, ok := after.Files[p]; !ok && covered(p) {
			c.Files = append(c.Files, ChangedFile{Path: p, Operation: Deleted})
		}
	}
	sort.Slice(c.Files, func(i, j int) bool { return walkLess(c.Files[i].Path, c.Files[j].Path) })
	return c
}

// walkLess orders paths as a lexical directory walk visits them: segment
// by segment.
func walkLess(a, b string) bool {
	for {
		as, arest, amore := strings.Cut(a, "/")
		bs, brest, bmore := strings.Cut(b, "/")
		if as != bs {
			return as < bs
		}
		if !amore || !bmore {
			return !amore && bmore
		}
		a, b = arest, brest
	}
}
