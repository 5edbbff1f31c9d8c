package sandbox

import (
	"path"
	"path/filepath"
	"strings"
)

// Mount is a host directory shown read-only inside an isolated sandbox
// (Options.Mounts).
type Mount struct {
	// Source is the absolute host directory.
	Source string `json:"source"`
	// Target is the absolute path inside the sandbox.
	Target string `json:"target"`
}

// HostPather is implemented by sandboxes that honored some of their
// Options.Mounts.
type HostPather interface {
	// HostPath returns where the host path p, inside a honored mount's
	// Source, is visible in the sandbox, or false.
	HostPath(p string) (string, bool)
}

// HostPath returns where the host path p is visible inside the sandbox
// without copying: p itself in a sandbox that shares the host's
// filesystem, its place under a mount the provider honored in an isolated
// one, or false.
func (l *Lease) HostPath(p string) (string, bool) {
	if !l.caps.Isolated {
		return p, true
	}
	if hp, ok := l.sb.(HostPather); ok {
		return hp.HostPath(p)
	}
	return "", false
}

// MapMount maps host path p through mounts: its place under the Target of
// the mount whose Source contains it. Providers implementing HostPather
// use it.
func MapMount(mounts []Mount, p string) (string, bool) {
	p = filepath.Clean(p)
	for _, m := range mounts {
		src := filepath.Clean(m.Source)
		if p == src {
			return m.Target, true
		}
		if rest, ok := strings.CutPrefix(p, src+string(filepath.Separator)); ok {
			return path.Join(m.Target, filepath.ToSlash(rest)), true
		}
	}
	return "", false
}
