//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package bootstrap

import (
	"context"
	"sync"
)

var (
	locksMu sync.Mutex
	locks   = map[string]chan struct{}{}
)

// lockFile serializes holders of path within this process only: this
// platform has no flock, so two outpost processes may download the same
// artifact at once (each still verifies and renames atomically).
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	locksMu.Lock()
	ch, ok := locks[path]
	if !ok {
		ch = make(chan struct{}, 1)
		locks[path] = ch
	}
	locksMu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
		if waiting != nil {
			waiting()
		}
		select {
		case ch <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return func() { <-ch }, nil
}
