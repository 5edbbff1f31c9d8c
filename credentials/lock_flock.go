//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package credentials

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/outposthq/outpost/internal/flock"
)

// tryLock takes an exclusive, non-blocking flock on lockPath inside dir,
// creating both as needed (0700 and 0600). It fails with errLocked when
// another open file description holds the lock. The lock goes away with
// the process, so a crashed holder never leaves a file reserved.
func tryLock(dir, lockPath string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("%s belongs to another user", dir)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.Lock(f, lockPath, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrLocked) {
			return nil, errLocked
		}
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
