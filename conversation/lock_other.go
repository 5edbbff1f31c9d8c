//go:build !unix

package conversation

import (
	"errors"
	"fmt"
	"os"
)

type lockedFile struct{ f *os.File }

var errLocked = errors.New("locked")

func lockFile(path string, wait bool) (*lockedFile, error) {
	return nil, fmt.Errorf("lock %s: %w: the filesystem store needs flock(2)", path, errors.ErrUnsupported)
}

func (l *lockedFile) unlock(remove bool) error { return nil }
