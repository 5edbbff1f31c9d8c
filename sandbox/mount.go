package sandbox

import (
	"context"

	"github.com/outposthq/outpost/sandbox/driver"
)

// HostPath returns where the host path p is visible inside the sandbox
// without copying: p itself in a sandbox that shares the host's
// filesystem, its place under a mount the provider honored in an isolated
// one, or false.
func (l *Lease) HostPath(p string) (string, bool) {
	if !l.caps.Isolated {
		return p, true
	}
	if hp, ok := l.sb.(driver.HostPather); ok {
		return hp.HostPath(p)
	}
	return "", false
}

// HostPathError is why the last HostPath answered false when the
// provider knows (driver.HostPathExplainer: a mirror to a remote host
// that failed), coded as the lease's errors are (a dropped connection is
// a vanished sandbox); nil otherwise.
func (l *Lease) HostPathError(ctx context.Context) error {
	if x, ok := l.sb.(driver.HostPathExplainer); ok {
		return l.wrap(ctx, "mount", x.HostPathError())
	}
	return nil
}
