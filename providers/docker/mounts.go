package docker

import (
	"os"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/docker/docker/api/types/mount"
)

// sharedMounts picks the requested host mounts (driver.Options.Mounts,
// such as the bootstrap cache) the lease can honor: only on an engine on
// this machine, which sees its directories, and only existing absolute
// directories mounted at clean absolute paths outside the provider's own
// (/outpost, /workspace). The rest are ignored: the caller copies instead.
func sharedMounts(eng *engine, req []driver.Mount) []driver.Mount {
	if !eng.local {
		return nil
	}
	var out []driver.Mount
	for _, m := range req {
		if !driver.Shareable(m, layout.StateDir, layout.Workspace) {
			continue
		}
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, m)
	}
	return out
}

// within reports whether p is dir or below it.

// bindMounts are the engine mounts of the lease's shared host directories:
// read-only binds.
func (s *Sandbox) bindMounts() []mount.Mount {
	var out []mount.Mount
	for _, m := range s.shared {
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: true})
	}
	return out
}

// HostPath returns where a host path under one of the lease's shared
// directories is visible in the container. It implements
// driver.HostPather.
func (s *Sandbox) HostPath(p string) (string, bool) { return driver.MapMount(s.shared, p) }
