package acp

import (
	"context"
	"sync"
	"time"

	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// DefaultSandboxIdle is Options.SandboxIdle's default: how long a
// session keeps its sandbox with no prompt running.
const DefaultSandboxIdle = 10 * time.Minute

// kept is a session's sandbox between its prompts: the provider that
// made it and the lease a successful turn left (engine.RunOptions.Keep).
// The next prompt runs on it, so a session's sandbox (a container on
// docker, with whatever the agent installed outside the workspace) lives
// from prompt to prompt instead of one a prompt. It is released when a
// turn on it fails, when the session closes or is loaded again, when
// the connection ends, and after idle with no prompt.
type kept struct {
	idle time.Duration

	mu       sync.Mutex
	provider driver.Provider
	lease    *sandbox.Lease
	timer    *time.Timer
	closed   bool // no lease is kept from now on
}

// take returns the kept sandbox for a turn, or none (lease nil): the
// turn then opens a provider and allocates one. The sandbox is the
// turn's until it puts it back or releases it.
func (k *kept) take() (driver.Provider, *sandbox.Lease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	p, l := k.provider, k.lease
	k.provider, k.lease = nil, nil
	return p, l
}

// keeps reports whether the session keeps a sandbox between prompts
// (SandboxIdle not negative).
func (k *kept) keeps() bool { return k.idle >= 0 }

// put keeps p and l (the turn's, which succeeded) for the next prompt,
// unless the session closed meanwhile: then they are released.
func (k *kept) put(p driver.Provider, l *sandbox.Lease) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		release(p, l)
		return
	}
	k.provider, k.lease = p, l
	k.timer = time.AfterFunc(k.idle, func() {
		k.mu.Lock()
		if k.lease != l {
			k.mu.Unlock()
			return // taken by a prompt, or already released
		}
		k.provider, k.lease, k.timer = nil, nil, nil
		k.mu.Unlock()
		release(p, l)
	})
	k.mu.Unlock()
}

// close releases the kept sandbox, if any, and keeps none from now on.
func (k *kept) close() {
	k.mu.Lock()
	k.closed = true
	p, l := k.provider, k.lease
	k.provider, k.lease = nil, nil
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	k.mu.Unlock()
	release(p, l)
}

// release closes a lease (bounded by sandbox.ReleaseTimeout) and its
// provider; either may be nil.
func release(p driver.Provider, l *sandbox.Lease) {
	if l != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.ReleaseTimeout)
		_ = l.Close(ctx)
		cancel()
	}
	if p != nil {
		_ = p.Close()
	}
}
