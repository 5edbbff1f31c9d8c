// Package lookpath finds a program the way a POSIX shell does, on a PATH
// given as a value rather than read from the process's own environment:
// the local provider, the in-container shim and serve's agents list each
// search the PATH of the environment they plan, not outpost's.
//
// The rules (os/exec.LookPath's, without its refusal of relative results):
// a name with a slash is used as it is; other names are tried in each
// directory of the PATH in order, an empty entry meaning the working
// directory; a match must be a regular file the caller may execute
// (access(2) with X_OK, so a root caller still needs an execute bit).
package lookpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Find returns the path of program on pathEnv. A match found through a
// relative PATH entry is made absolute. The error wraps exec.ErrNotFound
// when no directory holds it, or the reason a named file cannot run.
func Find(program, pathEnv string) (string, error) {
	if program == "" {
		return "", &exec.Error{Name: program, Err: exec.ErrNotFound}
	}
	if strings.Contains(program, "/") {
		if err := Executable(program); err != nil {
			return "", &exec.Error{Name: program, Err: err}
		}
		return program, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, program)
		if Executable(p) != nil {
			continue
		}
		if !filepath.IsAbs(p) {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
		}
		return p, nil
	}
	return "", &exec.Error{Name: program, Err: exec.ErrNotFound}
}

// Executable says why p cannot be run by this process: nil when it is a
// regular file with an execute bit the caller may use.
func Executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exec.ErrNotFound
		}
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: not an executable file", fs.ErrPermission)
	}
	return syscall.Access(p, 1) // X_OK, as the caller's user
}
