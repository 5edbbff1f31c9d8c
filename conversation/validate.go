package conversation

import (
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// limits bounds what a conversation may hold.
type limits struct {
	size  int64 // total bytes of file data
	files int   // number of files
	// Checkpoints' objects an archive may carry (Import); none in a
	// stored conversation.
	objects     int
	objectBytes int64
}

var defaultLimits = limits{size: MaxSize, files: MaxFiles}

// Validate checks a conversation before it is stored; every Store's Put
// calls it. It returns an error wrapping ErrInvalid for an id ValidID
// refuses, a time outside years 0-9999, metadata text that is not UTF-8,
// duplicate paths, a path that is also another path's directory,
// or more than MaxFiles files or MaxSize bytes; and an error wrapping
// ErrUnsafe for a path that is empty, absolute, not clean, longer than
// MaxPathLen, not UTF-8, contains "..", a backslash or NUL, or for a mode
// with bits other than permissions (links, devices, setuid...).
func Validate(m Meta, files []File) error {
	return validate(m, files, defaultLimits)
}

func validate(m Meta, files []File, lim limits) error {
	if !ValidID(m.ID) {
		return fmt.Errorf("%w: id %q (want 1-128 of [a-z0-9_-])", ErrInvalid, m.ID)
	}
	for _, t := range []time.Time{m.Created, m.Updated} {
		if y := t.Year(); y < 0 || y > 9999 {
			return fmt.Errorf("%w: %s: time %v outside years 0-9999", ErrInvalid, m.ID, t)
		}
	}
	for _, s := range []string{m.Agent, m.Native, m.Parent, m.Workdir, m.Sandbox, m.Model} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: %s: metadata %q is not UTF-8", ErrInvalid, m.ID, s)
		}
	}
	if len(files) > lim.files {
		return fmt.Errorf("%w: %s has %d files, more than %d", ErrInvalid, m.ID, len(files), lim.files)
	}
	var total int64
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if err := checkMode(f.Path, f.Mode); err != nil {
			return err
		}
		total += int64(len(f.Data))
		if total > lim.size {
			return fmt.Errorf("%w: %s holds more than %d bytes", ErrInvalid, m.ID, lim.size)
		}
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	return checkTree(paths)
}

// checkPath reports an unsafe home-relative (or root-relative) path.
func checkPath(p string) error {
	if !validPath(p) {
		return fmt.Errorf("%w: %q (want a clean relative path inside the home)", ErrUnsafe, p)
	}
	return nil
}

func validPath(p string) bool {
	if p == "" || len(p) > MaxPathLen || !utf8.ValidString(p) || !harness.RelativePath(p) {
		return false
	}
	c, err := tarsafe.CleanName(p)
	return err == nil && c == p && c != "."
}

func checkMode(p string, mode uint32) error {
	if mode&^0o777 != 0 {
		return fmt.Errorf("%w: %q has mode %#o (only permission bits are allowed)", ErrUnsafe, p, mode)
	}
	return nil
}

// checkTree refuses duplicate paths and a path that is a directory of
// another: both cannot be regular files in one tree. Paths are valid.
func checkTree(paths []string) error {
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		if seen[p] {
			return fmt.Errorf("%w: duplicate path %q", ErrInvalid, p)
		}
		seen[p] = true
	}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				return fmt.Errorf("%w: %q is a file and the directory of %q", ErrInvalid, d, p)
			}
		}
	}
	return nil
}

// under returns p relative to root and true when p is strictly inside root.
func under(p, root string) (string, bool) {
	rel, ok := strings.CutPrefix(p, root+"/")
	return rel, ok && rel != ""
}
