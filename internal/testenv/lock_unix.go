//go:build unix

package testenv

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on the file at p (created if missing),
// waiting for it; the function returned releases it.
func lockFile(p string) (func(), error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
