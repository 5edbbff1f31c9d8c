//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package bootstrap

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often a waiting lock retries.
const lockPoll = 50 * time.Millisecond

// lockFile takes an exclusive flock on path (created 0600 as needed),
// waiting for another holder until ctx ends. It calls waiting once if it
// has to wait. The lock is released by unlock, or by the kernel when the
// process dies, so a crashed download never blocks the next one.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	var t *time.Ticker
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, &fs.PathError{Op: "flock", Path: path, Err: err}
		}
		if t == nil {
			if waiting != nil {
				waiting()
			}
			t = time.NewTicker(lockPoll)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
