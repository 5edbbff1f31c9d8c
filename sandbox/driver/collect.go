package driver

import (
	"context"
	"time"
)

// Collector is implemented by providers that can find and remove what
// outpost processes that died without releasing their sandboxes left
// behind (orphans): containers and their volumes, lease directories on a
// host, pods and their owner records. `outpost gc` runs it through the
// portable layer (sandbox.Collect); providers may also sweep on their own
// when they open a sandbox.
type Collector interface {
	// Collect removes the orphans whose owner is known to be gone (every
	// sandbox of the provider with All), or only lists them with DryRun.
	// Failing to remove one is recorded in its Orphan and joined in the
	// returned error; the sweep goes on. Sandboxes of this very process
	// are never collected.
	Collect(ctx context.Context, opts CollectOptions) (Collection, error)
}

// CollectOptions configure a Collect.
type CollectOptions struct {
	// All removes every sandbox of the provider, whatever its owner's
	// state (when owners on other machines are known to be gone).
	All bool
	// DryRun lists what would be removed and removes nothing.
	DryRun bool
}

// Collection is what a Collect found and did.
type Collection struct {
	// Where names the place swept: a Docker engine, an SSH host, a
	// namespace, a directory.
	Where string `json:"where"`
	// Orphans are what was found, removed unless DryRun.
	Orphans []Orphan `json:"orphans"`
	// Kept counts the sandboxes left alone (owner alive or unknown).
	Kept int `json:"kept"`
	// Report is the provider's own report, with the facts only it knows
	// (docker.GCReport, ssh.GCReport, kubernetes.GCReport); nil when the
	// provider has none. `outpost gc --json` prints it in place of the
	// collection.
	Report any `json:"-"`
}

// Orphan is one thing a Collect found.
type Orphan struct {
	// Kind says what it is: "container", "volume", "lease", "pod", "home".
	Kind string `json:"kind"`
	// Name identifies it where it lives (a container id, a directory).
	Name string `json:"name"`
	// Owner describes the process (or holder) that made it, when known.
	Owner string `json:"owner,omitempty"`
	// State is the owner's state as the provider judged it ("dead",
	// "unknown", "alive" with All); empty when it has none to give.
	State   string    `json:"state,omitempty"`
	Created time.Time `json:"created,omitzero"`
	Removed bool      `json:"removed"`
	Error   string    `json:"error,omitempty"`
}
