package sandbox

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/sandbox/driver"
)

// CacheMounts are the mounts a lease should be opened with so that the
// pinned CLI name runs from inst's host cache: the cache's unpacked CLIs,
// read-only, when name is a CLI the installer downloads and caches and
// the provider's sandboxes are isolated. With them an install copies
// nothing into the sandbox; a provider that cannot mount them ignores
// them, and the install copies instead. A turn opens its lease with them;
// so do `outpost bootstrap` and anything that prepares sandboxes ahead of
// turns.
func CacheMounts(inst *bootstrap.Installer, caps driver.Capabilities, name string) []driver.Mount {
	if name == "" || !caps.Isolated || !inst.Cached(name) {
		return nil
	}
	host, target, err := inst.SharedCache()
	if err != nil {
		return nil // the install reports the cache's trouble if it needs it
	}
	return []driver.Mount{{Source: host, Target: target}}
}

// Installation is what Install did: the install, and the first line the
// installed CLI printed when asked for its version.
type Installation struct {
	bootstrap.Installed
	Check string `json:"check,omitempty"`
}

// installCheckTimeout bounds the installed CLI's version command.
const installCheckTimeout = 2 * time.Minute

// Install installs the pinned CLI name into the lease as a turn would
// (the lease should have been opened with CacheMounts), even when an
// executable of that name is already on the sandbox's PATH, and checks
// that it runs: `--version`, or `version` for outpost's own binary.
// Errors are coded: bootstrap for a failed install or check, cancelled or
// timeout when ctx ends.
func Install(ctx context.Context, lease *Lease, inst *bootstrap.Installer, name string, opts *bootstrap.EnsureOptions) (*Installation, error) {
	o := bootstrap.EnsureOptions{Pinned: true}
	if opts != nil {
		o = *opts
		o.Pinned = true
	}
	installed, err := inst.Install(ctx, lease, name, &o)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "bootstrap", err)
		}
		return nil, outpost.Wrap(outpost.Bootstrap, "install", err)
	}
	res := &Installation{Installed: *installed}
	args := []string{"--version"}
	if pin, ok := inst.Pin(name); ok && pin.Kind == bootstrap.KindSelf {
		args = []string{"version"}
	}
	env := maps.Clone(lease.Environment().Defaults)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, lease.Environment().Fixed)
	cctx, cancel := context.WithTimeout(ctx, installCheckTimeout)
	defer cancel()
	r, err := lease.Exec(cctx, driver.ExecRequest{Path: installed.Path, Args: args, Env: env}, 64<<10)
	if err == nil && !r.Status.Success() {
		err = fmt.Errorf("exited with %d: %s", r.Status.Code, strings.TrimSpace(string(r.Stderr)))
	}
	if err != nil {
		return res, outpost.Wrap(outpost.Bootstrap, "check", fmt.Errorf("running %s %s: %w", installed.Path, strings.Join(args, " "), err))
	}
	res.Check, _, _ = strings.Cut(strings.TrimSpace(string(r.Stdout)), "\n")
	return res, nil
}
