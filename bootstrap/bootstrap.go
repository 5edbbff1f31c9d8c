// Package bootstrap installs an agent's pinned CLI into a sandbox that
// lacks it, before the turn runs.
//
// Every built-in agent has a bootstrap name (Known). The echo agent's
// install is outpost's own binary: on a sandbox that shares the host's
// filesystem it is the running executable itself; isolated sandboxes get
// a copy. The pinned npm and archive installs of the other agents, verified
// by SHA-512 and cached on the host, arrive with their own issue; until
// then their CLI must already be on the sandbox's PATH.
//
// bootstrap does not import sandbox: it declares what it needs of one
// (Target), which *sandbox.Lease satisfies through a small adapter in the
// turn engine.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// ErrUnknown is returned for a bootstrap name no installer knows.
var ErrUnknown = errors.New("bootstrap: unknown agent")

// ErrMissing is returned when the executable is absent and cannot be
// installed.
var ErrMissing = errors.New("bootstrap: executable not found in the sandbox")

var known = map[string]bool{"echo": true, "claude": true, "codex": true, "copilot": true, "antigravity": true}

// Known reports whether name is a bootstrap name outpost can install.
func Known(name string) bool { return known[name] }

// Names lists the known bootstrap names.
func Names() []string {
	out := make([]string, 0, len(known))
	for n := range known {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Target is what an installer needs of a sandbox.
type Target interface {
	// Isolated reports whether the sandbox has its own filesystem.
	Isolated() bool
	// LookPath finds an executable on the sandbox's PATH.
	LookPath(ctx context.Context, name string) (string, error)
	// CopyIn extracts a tar stream into dir inside the sandbox.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
}

// Installer installs pinned CLIs. The zero value is ready to use.
type Installer struct {
	// Self is the outpost binary used as the echo agent; default
	// os.Executable().
	Self string
	// SelfStatic, when set, is a statically linked outpost binary copied
	// into isolated sandboxes that lack one (defaults to Self).
	SelfStatic string
}

// Ensure makes sure executable (a command name or path) can run in t for
// the agent with bootstrap name, and returns the path to run.
func (i *Installer) Ensure(ctx context.Context, t Target, name, executable string) (string, error) {
	if name != "" && !Known(name) {
		return "", fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, Names())
	}
	if name == "echo" && !t.Isolated() {
		if i.Self != "" {
			return i.Self, nil
		}
		return os.Executable()
	}
	p, err := t.LookPath(ctx, executable)
	if err == nil {
		return p, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return "", fmt.Errorf("%w: %s (install it in the sandbox or image; pinned installs of %q are not available yet)", ErrMissing, executable, name)
}
