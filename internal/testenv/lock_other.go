//go:build !unix

package testenv

import "sync"

// lockMu stands in for the file lock where there is none: the builds are
// shared by this process's tests alone.
var lockMu sync.Mutex

// lockFile locks within the process only.
func lockFile(string) (func(), error) {
	lockMu.Lock()
	return lockMu.Unlock, nil
}
