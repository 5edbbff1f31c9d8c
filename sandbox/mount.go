package sandbox

import "github.com/outposthq/outpost/sandbox/driver"

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
