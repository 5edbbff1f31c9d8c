//go:build unix

// Package flock takes flock(2) locks: the kernel frees them when their
// holder dies, however it dies. The conversation store's holds and the
// credentials' reservations share it.
package flock

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// ErrLocked is a non-blocking lock that another open file description holds.
var ErrLocked = errors.New("locked")

// Lock takes the lock how (syscall.LOCK_EX or LOCK_SH, with LOCK_NB not to
// wait) on f, opened from path, retrying when a signal interrupts the wait.
// A held non-blocking lock is ErrLocked; other failures are *fs.PathError.
func Lock(f *os.File, path string, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		}
		return &fs.PathError{Op: "flock", Path: path, Err: err}
	}
}
