//go:build !unix

package conversation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

type lockedFile struct{ f *os.File }

var errLocked = errors.New("locked")

func lockFile(path string, wait bool) (*lockedFile, error) {
	return nil, fmt.Errorf("lock %s: %w: the filesystem store needs flock(2)", path, errors.ErrUnsupported)
}

func (l *lockedFile) unlock(remove bool) error { return nil }

// fileIdentity is unknown here: an FS index file is then checked against
// the directory's time and each file's, as on Unix.
func fileIdentity(fs.FileInfo) [2]uint64 { return [2]uint64{} }
