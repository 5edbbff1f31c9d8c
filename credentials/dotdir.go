package credentials

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outposthq/outpost"
)

// ChangedMark is the file, relative to the working directory, that the
// engine leaves when the working directory's .outpost/ changed while a
// turn ran. While it exists, Resolve refuses: an agent that can write the
// working directory (a local sandbox) could have planted a .outpost/.env
// with a base URL of its choosing, which the next turn's credential
// gateway would send the real key to (issue 43). Removing it is the
// user's word that .outpost/ is theirs.
const ChangedMark = ".outpost/changed-during-turn"

// maxDotDirEntries bounds the walk of .outpost/: a directory holding more
// counts as changed whenever it is looked at twice.
const maxDotDirEntries = 1000

// DotDirState is what .outpost/ held at one time: each file's, link's or
// other non-directory entry's path (slash-separated, relative to the
// working directory) and a digest of its type, mode and content (a link's
// target), the mark excluded. A missing or empty directory is an empty
// state (a directory appearing empty changes nothing outpost reads; a
// docker bind workspace makes an empty one to mount over).
type DotDirState map[string]string

// ReadDotDirState reads <workdir>/.outpost/ (never following links).
func ReadDotDirState(workdir string) (DotDirState, error) {
	root := filepath.Join(workdir, PrivateDirName)
	st := DotDirState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(workdir, p)
		rel = filepath.ToSlash(rel)
		if rel == ChangedMark || d.IsDir() {
			return nil // a directory alone changes nothing outpost reads
		}
		if len(st) >= maxDotDirEntries {
			return fmt.Errorf("more than %d entries", maxDotDirEntries)
		}
		st[rel] = entryDigest(p, d)
		return nil
	})
	return st, err
}

// PrivateDirName is the working directory's private directory.
const PrivateDirName = ".outpost"

func entryDigest(p string, d fs.DirEntry) string {
	h := sha256.New()
	fmt.Fprintf(h, "%v\x00", d.Type())
	switch {
	case d.Type()&fs.ModeSymlink != 0:
		t, _ := os.Readlink(p)
		io.WriteString(h, t)
	case d.Type().IsRegular():
		if fi, err := d.Info(); err == nil {
			fmt.Fprintf(h, "%v\x00", fi.Mode())
		}
		if f, err := os.Open(p); err == nil {
			io.Copy(h, f)
			f.Close()
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Changed returns the entries that differ between st and now (added,
// removed or changed), sorted.
func (st DotDirState) Changed(now DotDirState) []string {
	var out []string
	for p, d := range now {
		if st[p] != d {
			out = append(out, p)
		}
	}
	for p := range st {
		if _, ok := now[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// MarkChanged leaves ChangedMark in workdir, naming the turn and the
// entries that changed while it ran.
func MarkChanged(workdir, turn string, changed []string) error {
	text := fmt.Sprintf("turn %s changed these entries of .outpost/ while it ran:\n%s\n"+
		"Review them; remove this file to let outpost read .outpost/ again.\n", turn, strings.Join(changed, "\n"))
	return os.WriteFile(filepath.Join(workdir, filepath.FromSlash(ChangedMark)), []byte(text), 0o600)
}

// checkChangedMark refuses, with a configuration error naming the mark,
// while workdir holds ChangedMark.
func checkChangedMark(workdir string) error {
	path := filepath.Join(workdir, filepath.FromSlash(ChangedMark))
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	what, turn := "a turn", ""
	var names []string
	for i, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); i == 0 && len(f) > 1 && f[0] == "turn" {
			turn = f[1]
		}
		if strings.HasPrefix(line, PrivateDirName+"/") || line == PrivateDirName {
			names = append(names, line)
		}
	}
	if turn != "" {
		what = "turn " + turn
	}
	if len(names) > 0 {
		what += " (" + strings.Join(names, ", ") + ")"
	}
	return &outpost.Error{Code: outpost.Configuration, Op: "env", Msg: filepath.Dir(path) + " changed while " + what +
		" ran, so the agent may have written it (a .env whose base URL would receive the real key); " +
		"review it, then remove " + path + " to accept it"}
}
