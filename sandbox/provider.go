package sandbox

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/outposthq/outpost/harness"
)

// Provider makes sandboxes. Implementations must be safe for concurrent use.
type Provider interface {
	// Name is the provider's registry name ("local", "docker").
	Name() string
	// Capabilities says what the provider's sandboxes can do. The engine
	// reads it before acting, never discovering "not supported" mid-turn.
	Capabilities() Capabilities
	// Open allocates a sandbox. On ctx cancel it returns promptly and
	// leaves nothing allocated. Errors are returned raw; the Lease wraps
	// them with code sandbox.
	Open(ctx context.Context, opts Options) (Sandbox, error)
}

// Options are the per-lease settings a provider receives.
type Options struct {
	// Workdir is the caller's working directory on the host. Providers make
	// it the sandbox's working directory (local: as is; docker: mounted or
	// copied).
	Workdir string
	// Labels are attached to the sandbox where the provider can (cleanup).
	Labels map[string]string
	// Mounts are host directories an isolated sandbox should see,
	// read-only, without copying (the bootstrap cache), where the
	// provider can: a provider that honors one reports it through
	// HostPather; one that cannot ignores it.
	Mounts []Mount
}

// Sandbox is one allocated sandbox: a private home, a working directory and
// a way to run processes and move files. Paths are as seen inside it.
type Sandbox interface {
	// ID identifies the sandbox (for logs and labels).
	ID() string
	// Home is the sandbox's private home directory (absolute).
	Home() string
	// Workdir is the working directory inside the sandbox (absolute).
	Workdir() string
	// Environment is the environment the provider defines for every
	// process. Fixed names (HOME, XDG_*) may not be set by a turn: doing so
	// is a configuration error. Defaults (PATH, LANG, TZ, TERM) may be
	// overridden.
	Environment() Environment
	// Start starts a process. It returns once the process runs; its exit is
	// read with Process.Wait. ctx bounds only the start, not the process's
	// life: stop it with Process.Signal.
	Start(ctx context.Context, req ExecRequest) (Process, error)
	// CopyIn extracts a tar stream into dir, an absolute directory inside
	// the sandbox, creating it if needed. The Lease has already refused
	// entries that escape dir.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
	// CopyOut returns a tar stream of path (a file or a directory, entries
	// named relative to path's parent as `docker cp` does). A missing path
	// gives an error satisfying errors.Is(err, fs.ErrNotExist).
	CopyOut(ctx context.Context, path string) (io.ReadCloser, error)
	// Close releases the sandbox and everything it holds. It is called
	// once, with a fresh context.
	Close(ctx context.Context) error
}

// Gone is implemented by sandboxes that can tell they were removed behind
// outpost's back (a container deleted during a turn).
type Gone interface {
	// Vanished reports whether the sandbox no longer exists.
	Vanished(ctx context.Context) bool
}

// Environment is the variables a provider defines.
type Environment struct {
	Fixed    map[string]string // HOME, XDG_*, TMPDIR: a turn may not override them
	Defaults map[string]string // PATH, LANG, TZ, TERM: a turn may override them
}

// ExecRequest is one process to start.
type ExecRequest struct {
	Path  string            // executable; looked up in Env["PATH"] when not absolute
	Args  []string          // arguments without the program name
	Env   map[string]string // the complete environment
	Dir   string            // working directory; "" = Workdir
	Stdin bool              // give the process a stdin pipe (otherwise /dev/null)
}

// Signal is how to stop a process.
type Signal int

const (
	Terminate Signal = iota // ask politely (SIGTERM to the process group)
	Kill                    // SIGKILL to the process group
)

// Process is a started process. Stdout and Stderr must be read
// concurrently. Wait returns when the process has exited; output it wrote
// can still be read afterwards.
type Process interface {
	// Stdin is nil unless the request asked for it.
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Stderr() io.Reader
	// Wait waits for the process to end. The exit status is a value; the
	// error is for the sandbox failing (e.g. vanished), not the process.
	Wait() (harness.ExitStatus, error)
	// Signal signals the process's whole group. Signalling a process that
	// has ended is not an error.
	Signal(s Signal) error
	// Close releases the streams, unblocking pending reads. After the
	// process has exited, a descendant may still hold its output open; the
	// engine closes the streams once it has drained them.
	Close() error
}

// Capabilities say what a provider's sandboxes can do.
type Capabilities struct {
	// HostFiles: host files from credential plans may be copied into the
	// sandbox's private home. False for local, whose home is on the host:
	// it receives only variables.
	HostFiles bool `json:"host_files"`
	// Isolated: processes cannot see the host's files and processes.
	Isolated bool `json:"isolated"`
	// Stdin: processes can be given a live standard input.
	Stdin bool `json:"stdin"`
	// Persistent: a lease keeps state between turns (home, processes).
	Persistent bool `json:"persistent"`
	// FixedEnv names the variables the provider defines for every process
	// (HOME, XDG_*...). A turn that sets one fails with configuration
	// before a sandbox is allocated.
	FixedEnv []string `json:"fixed_env"`
}

// PathLooker is implemented by sandboxes that can find an executable
// without starting a process (the local provider).
type PathLooker interface {
	LookPath(ctx context.Context, name, pathEnv string) (string, error)
}

// Factory makes a provider from string settings (e.g. "image" for docker).
type Factory func(settings map[string]string) (Provider, error)

var (
	regMu    sync.Mutex
	registry = map[string]Factory{}
)

// Register makes a provider available by name. It panics on a duplicate,
// like database/sql.Register: it is called from init functions.
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("sandbox: Register called twice for " + name)
	}
	registry[name] = f
}

// Open returns the registered provider name configured with settings.
func Open(name string, settings map[string]string) (Provider, error) {
	regMu.Lock()
	f, ok := registry[name]
	regMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown sandbox provider %q (known: %v)", name, Providers())
	}
	return f(settings)
}

// Providers lists the registered provider names.
func Providers() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
