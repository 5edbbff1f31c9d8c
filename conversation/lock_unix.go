//go:build unix

package conversation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/outposthq/outpost/internal/flock"
)

// lockedFile is a file holding an exclusive flock(2). The kernel frees the
// lock when the process dies, however it dies, so a lock never outlives
// its holder.
type lockedFile struct {
	f    *os.File
	path string
}

var errLocked = flock.ErrLocked

// lockFile opens (creating, 0600) path and takes an exclusive flock on it,
// waiting when wait is true, else failing with errLocked. It checks after
// locking that path still names the locked file (a releasing holder may
// have removed it) and starts again when not, so removing a lock file
// while holding it (unlock with remove) is safe.
func lockFile(path string, wait bool) (*lockedFile, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		how := syscall.LOCK_EX
		if !wait {
			how |= syscall.LOCK_NB
		}
		if err := flock.Lock(f, path, how); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		named, err2 := os.Lstat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return &lockedFile{f: f, path: path}, nil
		}
		f.Close() // removed or replaced meanwhile: lock the new one
		if err1 != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err1)
		}
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err2)
		}
	}
}

// unlock releases the lock, first removing the file when remove is set.
func (l *lockedFile) unlock(remove bool) error {
	var err error
	if remove {
		err = os.Remove(l.path)
	}
	return errors.Join(err, l.f.Close())
}

// fileIdentity is the device and inode of fi: what tells a directory from
// a copy of it (the FS index file, fsindexfile.go).
func fileIdentity(fi fs.FileInfo) [2]uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev is int32 on some systems
	}
	return [2]uint64{}
}
