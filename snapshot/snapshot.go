// Package snapshot describes a workspace's files by their metadata (size,
// modification time, mode; never their content), so that the engine can
// tell which files a turn created, modified and deleted by comparing the
// snapshot taken before the agent started with the one taken after it
// ended (output.Diff).
//
// Snapshot is the value a provider's driver.Snapshotter returns; Walk
// makes one of a directory on this machine, for providers whose workspace
// is a local directory and for the exec shim inside a container. The
// package imports only the standard library, so the driver contract, the
// shim and the output package share it without depending on each other.
package snapshot

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// Snapshot describes a workspace's files by path (slash-separated,
// relative to the workspace).
type Snapshot struct {
	Files map[string]FileStat `json:"files"`
	// Complete is false when the walk stopped at its limit; Last is then
	// the last path it described (paths after it, in walk order, are
	// unknown).
	Complete bool   `json:"complete"`
	Last     string `json:"last,omitempty"`
}

// FileStat is what a snapshot knows of one file.
type FileStat struct {
	Size    int64  `json:"s"`
	ModTime int64  `json:"t"` // Unix nanoseconds
	Mode    uint32 `json:"m"` // fs.FileMode: type and permission bits
}

// Skip reports whether a workspace path (slash-separated,
// relative) is left out of snapshots: any .git directory and the
// top-level .outpost directory (the caller's private settings).
func Skip(rel string) bool {
	if rel == ".outpost" || strings.HasPrefix(rel, ".outpost/") {
		return true
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".git" {
			return true
		}
	}
	return false
}

// Walk snapshots the directory dir on this machine, for
// providers whose workspace is a local directory (and for the docker
// shim, inside the container). Entries are visited in lexical order
// within each directory; links are not followed; special files and
// directories themselves are not listed. Entries that vanish during the
// walk are skipped, and so are the directories skip names (absolute paths:
// a provider's own state inside the workspace, such as a local lease's
// home under a workspace that holds $TMPDIR).
func Walk(ctx context.Context, dir string, limit int, skip ...string) (Snapshot, error) {
	s := Snapshot{Files: map[string]FileStat{}, Complete: true}
	skipped := map[string]bool{}
	for _, p := range skip {
		skipped[filepath.Clean(p)] = true
	}
	errLimit := errors.New("limit")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				if d != nil && d.IsDir() && p != dir {
					return filepath.SkipDir
				}
				if p == dir {
					return err
				}
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if Skip(rel) || (d.IsDir() && skipped[p]) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || (!d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished
		}
		if len(s.Files) >= limit {
			s.Complete = false
			return errLimit
		}
		s.Files[rel] = FileStat{Size: info.Size(), ModTime: info.ModTime().UnixNano(), Mode: uint32(info.Mode())}
		s.Last = rel
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return Snapshot{}, err
	}
	if s.Complete {
		s.Last = ""
	}
	return s, nil
}
