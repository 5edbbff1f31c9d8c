package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/snapshot"
)

// Provider makes sandboxes. Implementations must be safe for concurrent use.
type Provider interface {
	// Name is the provider's registry name ("local", "docker").
	Name() string
	// Capabilities says what the provider's sandboxes can do. The engine
	// reads it before acting, never discovering "not supported" mid-turn.
	Capabilities() Capabilities
	// Open allocates a sandbox. On ctx cancel it returns promptly and
	// leaves nothing allocated. Errors are returned raw; the portable
	// layer wraps them with code sandbox.
	Open(ctx context.Context, opts Options) (Sandbox, error)
	// Close releases what the provider holds for all its sandboxes (a
	// client connection). Sandboxes still open stay valid until their own
	// Close; the provider must not be used to Open after Close. Calling it
	// again returns nil.
	Close() error
}

// Options are the per-lease settings a provider receives.
type Options struct {
	// Workdir is the caller's working directory on the host. Providers make
	// it the sandbox's working directory (local: as is; docker: mounted or
	// copied). The portable layer fills in the default (the current
	// directory) before a provider sees it: it is never empty.
	Workdir string
	// Labels are attached to the sandbox where the provider can (cleanup).
	Labels map[string]string
	// Mounts are host directories an isolated sandbox should see,
	// read-only, without copying (the bootstrap cache), where the
	// provider can: a provider that honors one reports it through
	// HostPather; one that cannot ignores it.
	Mounts []Mount
	// Egress is the network the sandbox's processes may reach: EgressOpen
	// (what the provider's network reaches) or EgressGateway (nothing but
	// what a Tunneler carries to the host's gateway). A provider whose
	// Capabilities.Egress is false cannot enforce EgressGateway and runs
	// the sandbox as EgressOpen; the engine reports that as unenforced.
	Egress Egress
	// Progress, when set, receives how a long step of Open goes (an
	// image pulled or built before the sandbox can start), from one
	// goroutine at a time, before Open returns: a report when the step
	// starts, then at most one every ProgressInterval while it goes, and
	// a last one with Done set when it succeeded. Providers without such
	// steps never call it.
	Progress func(Progress)
}

// ProgressInterval is how often a provider reports byte counts at most
// (Options.Progress).
const ProgressInterval = 200 * time.Millisecond

// Steps of Progress.
const (
	// ProgressPull: the image is pulled from its registry.
	ProgressPull = "pull"
	// ProgressBuild: the image is built (docker's minimal image, from
	// nothing).
	ProgressBuild = "build"
)

// Progress is how an image pull or build of Open goes (Options.Progress).
// It serializes to JSON (the details of a notice event of kind "image").
type Progress struct {
	Step  string `json:"step"`  // ProgressPull or ProgressBuild
	Image string `json:"image"` // the image's reference
	// Layers counts the layers the engine named so far; LayersDone those
	// in place (downloaded and unpacked, or already present).
	Layers     int `json:"layers"`
	LayersDone int `json:"layers_done"`
	// Bytes are the layers' bytes downloaded so far, of Total, the sum of
	// the sizes known so far (the engine tells a layer's size once its
	// download starts): Total grows during a pull.
	Bytes int64 `json:"bytes"`
	Total int64 `json:"total"`
	// Done is set on the last report of a step that succeeded.
	Done bool `json:"done,omitempty"`
}

// Egress is a sandbox's network policy (Options.Egress).
type Egress string

const (
	// EgressOpen leaves the network as the provider makes it.
	EgressOpen Egress = "open"
	// EgressGateway cuts the sandbox off from every network: its
	// processes reach the host's credential gateway through a Tunneler
	// and, through the gateway's proxy, the hosts of an allowlist.
	EgressGateway Egress = "gateway"
)

// Sweeper is implemented by providers that remove, on a timer, the
// sandboxes of owners that died (kubernetes: the pods of expired owner
// Leases). A provider starts it with its first sandbox; a long-lived
// process that serves sandboxes (outpost serve) starts it at once, so
// that a replica which has not run a turn yet still removes what a lost
// one left. Sweep returns at once; Close stops it.
type Sweeper interface {
	Sweep()
}

// Tunneler is implemented by sandboxes whose processes cannot reach the
// host's loopback (docker, ssh, kubernetes): it carries connections made
// to an address on the sandbox's own loopback back to the host, over the
// lease's own connection to the sandbox (no port or socket is opened to
// anyone else).
type Tunneler interface {
	// Tunnel listens on the sandbox's loopback and returns the address
	// processes inside it dial ("127.0.0.1:40123") and a host-side
	// listener whose Accept yields each connection made there. Closing
	// the listener ends the tunnel; so does the sandbox's Close.
	Tunnel(ctx context.Context) (addr string, l net.Listener, err error)
}

// TunnelAccept is the Accept of a Tunneler's listener: the next
// connection accept yields; once accept fails, an error wrapping
// net.ErrClosed (prefixed "what: ") when closed says the listener's Close
// was called, else what ended makes of accept's error (why the tunnel
// ended: the lease released, its connection lost...).
func TunnelAccept(what string, accept func() (net.Conn, error), closed func() bool, ended func(error) error) (net.Conn, error) {
	conn, err := accept()
	if err == nil {
		return conn, nil
	}
	if closed() {
		return nil, fmt.Errorf("%s: %w", what, net.ErrClosed)
	}
	return nil, ended(err)
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
	// the sandbox, creating it if needed. The portable layer has already
	// refused entries that escape dir.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
	// CopyOut returns a tar stream of path (a file or a directory, entries
	// named relative to path's parent as `docker cp` does). A missing path
	// gives an error satisfying errors.Is(err, fs.ErrNotExist).
	CopyOut(ctx context.Context, path string) (io.ReadCloser, error)
	// Close releases the sandbox and everything it holds. It is called
	// once, with a fresh context.
	Close(ctx context.Context) error
}

// Vanisher is implemented by sandboxes that can tell they were removed
// behind outpost's back (a container deleted during a turn). The portable
// layer asks it when an operation fails, and reports a vanished sandbox as
// code sandbox with details.vanished.
type Vanisher interface {
	// Vanished reports whether the sandbox no longer exists.
	Vanished(ctx context.Context) bool
}

// Degrader is implemented by sandboxes that can fall back to a slower way
// of running processes when the designed one cannot be had (docker: the
// container's init does not serve; kubernetes: the serving exec could not
// start; either way each process becomes an exec of its own). Degraded
// returns why the lease fell back, nil while it runs as designed. The
// portable layer reports it once per turn (Run) as a notice of kind
// degraded.
type Degrader interface {
	Degraded() error
}

// Warmer is implemented by sandboxes that can keep a process launcher
// ready, so that a Start that comes later costs less (docker keeps an exec
// of its shim waiting for its request). The portable layer calls it where
// a sandbox waits before its first process (a pooled one); providers
// without one need nothing.
type Warmer interface {
	// Warm readies the launcher and keeps one ready after every Start until
	// Close. It returns once the launcher is ready, or ctx ends (the
	// launcher is then still made). A launcher that fails costs nothing:
	// Start then starts the process the ordinary way. Close ends it.
	Warm(ctx context.Context) error
}

// Snapshotter is implemented by sandboxes that can describe their
// workspace cheaply (metadata only, no content), so the engine can report
// the files a turn created, modified and deleted: it takes one snapshot
// before the agent starts and one after it ends.
type Snapshotter interface {
	// SnapshotWorkspace describes at most limit entries of the workspace
	// (regular files and symbolic links, in snapshot.Walk's order),
	// skipping every .git directory and the top-level .outpost directory
	// (snapshot.Skip). Past limit, Complete is false.
	SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error)
}

// PathLooker is implemented by sandboxes that can find an executable
// without starting a process (the local provider).
type PathLooker interface {
	LookPath(ctx context.Context, name, pathEnv string) (string, error)
}

// Lister is implemented by sandboxes that can list a directory's regular
// files without copying them (the local provider).
type Lister interface {
	// List returns the regular files under dir as clean slash-separated
	// paths relative to dir, links neither followed nor listed. A missing
	// dir gives an error satisfying errors.Is(err, fs.ErrNotExist).
	List(ctx context.Context, dir string) ([]string, error)
}

// Environment is the variables a provider defines.
type Environment struct {
	Fixed    map[string]string // HOME, XDG_*, TMPDIR: a turn may not override them
	Defaults map[string]string // PATH, LANG, TZ, TERM: a turn may override them
}

// Clone is a copy of e whose maps the caller may change: what a
// Sandbox.Environment returns of the environment it keeps.
func (e Environment) Clone() Environment {
	return Environment{Fixed: maps.Clone(e.Fixed), Defaults: maps.Clone(e.Defaults)}
}

// Base is what every provider's Sandbox answers alike, settled when the
// provider opens it: the private home, the working directory and the
// environment of its processes. The providers' Sandbox types embed it for
// Home, Workdir and Environment, and their LookPath searches SearchPath.
type Base struct {
	home, workdir string
	env           Environment
}

// NewBase is the Base of a sandbox with this home, working directory
// (both absolute, inside the sandbox) and environment.
func NewBase(home, workdir string, env Environment) Base {
	return Base{home: home, workdir: workdir, env: env}
}

// Home is the sandbox's private home (Sandbox.Home).
func (b Base) Home() string { return b.home }

// Workdir is the working directory inside the sandbox (Sandbox.Workdir).
func (b Base) Workdir() string { return b.workdir }

// Environment is a copy of the environment the provider defines
// (Sandbox.Environment), which the caller may change.
func (b Base) Environment() Environment { return b.env.Clone() }

// SearchPath is the PATH a PathLooker searches: pathEnv, or the
// environment's default PATH when pathEnv is empty.
func (b Base) SearchPath(pathEnv string) string {
	if pathEnv == "" {
		return b.env.Defaults["PATH"]
	}
	return pathEnv
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
	// Egress: Options.Egress = EgressGateway is enforced (docker's network
	// none, a kubernetes NetworkPolicy, local in namespaces). False for
	// local and ssh on the host.
	Egress bool `json:"egress"`
	// Isolation is how a lease's processes are kept from the host's, as
	// they run (the effective mode, not the setting): IsolationNone,
	// IsolationNamespaces, IsolationContainer, IsolationPod; "" where the
	// provider does not say.
	Isolation string `json:"isolation,omitempty"`
}

// Isolation modes (Capabilities.Isolation).
const (
	// IsolationNone: processes run on the host (or the ssh host) as its
	// user, seeing what the user sees.
	IsolationNone = "none"
	// IsolationNamespaces: processes run in namespaces of their own
	// (bubblewrap).
	IsolationNamespaces = "namespaces"
	// IsolationContainer: processes run in a container (docker).
	IsolationContainer = "container"
	// IsolationPod: processes run in a pod (kubernetes).
	IsolationPod = "pod"
)

// IsolationNoter is implemented by providers whose leases run less
// isolated than asked (isolation=auto where bubblewrap is missing or
// refused): IsolationNote says why, "" when they run as asked. `outpost
// agents`, `outpost doctor` and GET /v1/agents show it.
type IsolationNoter interface {
	IsolationNote() string
}

// Factory makes a provider from string settings (e.g. "image" for docker).
type Factory func(settings map[string]string) (Provider, error)

var (
	regMu    sync.Mutex
	registry = map[string]Factory{}
)

// Register makes a provider available by name. It panics on a duplicate,
// like database/sql.Register: providers call it from their init function,
// which is the one line a new provider needs.
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("sandbox/driver: Register called twice for " + name)
	}
	registry[name] = f
}

// Lookup returns the factory registered under name.
func Lookup(name string) (Factory, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	f, ok := registry[name]
	return f, ok
}

// Names lists the registered provider names, sorted.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	return slices.Sorted(maps.Keys(registry))
}

// ErrUnknown is the cause of a lookup of a name nobody registered.
var ErrUnknown = fmt.Errorf("unknown sandbox provider")

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

// HostPathExplainer is implemented by sandboxes whose HostPath can fail
// for a reason other than "not in a mount" (a remote host's mirror of a
// directory that could not be made): HostPathError says why the last
// HostPath answered false, or nil.
type HostPathExplainer interface {
	HostPathError() error
}

// Shareable reports whether the requested mount m can be honored in a
// sandbox whose own directories are own: an absolute source, a clean
// absolute target other than "/", neither inside nor holding any of own.
func Shareable(m Mount, own ...string) bool {
	if !filepath.IsAbs(m.Source) || !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target || m.Target == "/" {
		return false
	}
	for _, o := range own {
		if within(m.Target, o) || within(o, m.Target) {
			return false
		}
	}
	return true
}

// within reports whether the slash path p is dir or under it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

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

// ErrClosed is the error of every operation on a released sandbox. The
// portable layer returns it for a released lease; drivers may return it
// for a closed Sandbox.
var ErrClosed = errors.New("sandbox: lease released")

// ErrDisconnected is wrapped by the errors of a sandbox whose connection
// to its host dropped (ssh): its processes are lost to outpost. Such a
// sandbox also reports Vanished; the portable layer reports the failure as
// code sandbox with details.vanished and details.disconnected.
var ErrDisconnected = errors.New("sandbox: connection to the sandbox's host lost")

// ErrUnreachable is wrapped by the errors of a provider whose host does
// not answer: an SSH server (ssh wraps it with its name: "ssh: host
// unreachable: ..."), a cluster's API server or a Docker Engine (their own
// sentinels, made by Unreachable, say it in their words).
var ErrUnreachable = errors.New("host unreachable")

// Unreachable returns a provider's own sentinel for ErrUnreachable: an
// error of that text which errors.Is also finds to be ErrUnreachable.
func Unreachable(text string) error { return &unreachable{text} }

type unreachable struct{ text string }

func (e *unreachable) Error() string        { return e.text }
func (e *unreachable) Is(target error) bool { return target == ErrUnreachable }

// ErrVanished is wrapped by the errors of a sandbox that was removed,
// stopped or lost behind outpost's back (a container, a pod). The portable
// layer reports such failures as code sandbox with details.vanished.
var ErrVanished = errors.New("sandbox vanished")

// ErrConflict is wrapped when copying the workspace back found files
// changed both on the host and in the sandbox: the host's versions were
// kept and the sandbox's written beside them (see SyncWorkspace).
var ErrConflict = errors.New("workspace changed on both sides")

// ErrPath is wrapped when a path given to CopyIn or CopyOut is not an
// absolute, clean path inside the sandbox's own filesystem.
var ErrPath = errors.New("invalid sandbox path")

// CheckPath refuses a path given to CopyIn or CopyOut that is not
// absolute and clean (or holds a NUL), or that lies in a kernel filesystem
// (/proc, /sys, /dev, but not /dev/shm: a tmpfs of ordinary files, where a
// TMPDIR, and so the local provider's homes, may lie); the error wraps
// ErrPath. The portable layer checks
// every path before a driver sees it, so drivers check only what is their
// own (a remote shell's limits, say).
func CheckPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: %q is not an absolute clean path", ErrPath, p)
	}
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if (p == k || strings.HasPrefix(p, k+"/")) && p != "/dev/shm" && !strings.HasPrefix(p, "/dev/shm/") {
			return fmt.Errorf("%w: %s is a kernel filesystem", ErrPath, p)
		}
	}
	return nil
}

// ReleaseTimeout bounds a release of a sandbox (Close, and the clean-up of
// an Open that failed) whose context has no deadline or has already ended;
// the portable layer also bounds a turn's store write with it.
const ReleaseTimeout = 60 * time.Second

// ReleaseContext is the context a Sandbox.Close works under: ctx's values
// without its cancellation, bounded by ctx's deadline while that is still
// ahead, else by ReleaseTimeout. A release must finish even when the turn
// that asks for it was cancelled.
func ReleaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil && time.Until(d) > 0 {
		return context.WithDeadline(cctx, d)
	}
	return context.WithTimeout(cctx, ReleaseTimeout)
}

// RemovalContext is the context of a release's last step, removing what
// the lease holds (its container, pod or directory): ctx's values, bounded
// by a ReleaseTimeout of its own. The steps before it (stopping the
// processes, copying the workspace back) may have used the whole of the
// release's deadline; the removal must still run, or the sandbox would be
// left running until a sweep finds it.
func RemovalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}

// ErrStalled is the cause of a release's copy back that went
// CopyBackIdle without a byte (ProgressBound).
var ErrStalled = errors.New("no progress")

// CopyBackIdle bounds a release's copy back by its progress: it fails once
// no byte has arrived for this long, however long it has run. A variable
// for tests.
var CopyBackIdle = ReleaseTimeout

// ProgressBound runs a release's copy back (copy) bounded by its progress,
// not by ctx's deadline: a large workspace that takes longer to copy back
// than the release allows is not lost while its bytes still flow. copy
// gets a context with ctx's values that ends once CopyBackIdle passes
// without progress, and wrap, which it puts around the stream it reads
// (every read that returns bytes is progress). When the copy stalled,
// the error says so and wraps ErrStalled.
func ProgressBound(ctx context.Context, copy func(ctx context.Context, wrap func(io.Reader) io.Reader) error) error {
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	idle := CopyBackIdle
	timer := time.AfterFunc(idle, func() { cancel(ErrStalled) })
	defer timer.Stop()
	wrap := func(r io.Reader) io.Reader { return progressReader{r, func() { timer.Reset(idle) }} }
	err := copy(pctx, wrap)
	if err != nil && errors.Is(context.Cause(pctx), ErrStalled) {
		return fmt.Errorf("no byte for %s; the changes not yet copied are lost: %w: %w", idle, ErrStalled, err)
	}
	return err
}

// Wrapped is r behind wrap (a ProgressBound's), or r itself when wrap is
// nil: a copy back outside a release runs without one.
func Wrapped(r io.Reader, wrap func(io.Reader) io.Reader) io.Reader {
	if wrap == nil {
		return r
	}
	return wrap(r)
}

// progressReader calls progress after every read that returned bytes.
type progressReader struct {
	r        io.Reader
	progress func()
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}

// xdgDirs are the XDG base directories of a lease's home, under it.
var xdgDirs = []struct{ name, dir string }{
	{"XDG_CONFIG_HOME", ".config"},
	{"XDG_DATA_HOME", ".local/share"},
	{"XDG_CACHE_HOME", ".cache"},
	{"XDG_STATE_HOME", ".local/state"},
}

// HomeEnv is the fixed environment of a lease's private home: HOME, the
// XDG base directories under it, and TMPDIR (tmp), each an absolute path
// with forward slashes. Every provider but an in-memory one defines it.
func HomeEnv(home, tmp string) map[string]string {
	env := map[string]string{"HOME": home, "TMPDIR": tmp}
	for _, x := range xdgDirs {
		env[x.name] = home + "/" + x.dir
	}
	return env
}

// HomeVars names HomeEnv's variables (HOME, XDG_CONFIG_HOME,
// XDG_DATA_HOME, XDG_CACHE_HOME, XDG_STATE_HOME, TMPDIR): the
// Capabilities.FixedEnv of a provider whose Environment().Fixed is a
// HomeEnv. A new slice each call.
func HomeVars() []string {
	names := []string{"HOME"}
	for _, x := range xdgDirs {
		names = append(names, x.name)
	}
	return append(names, "TMPDIR")
}

// HomeDirs are the directories a provider makes for HomeEnv(home, tmp):
// home, the XDG base directories under it with the directories between
// (home/.local), and tmp, each parent before its children and joined
// with forward slashes. home and tmp may be relative.
func HomeDirs(home, tmp string) []string {
	dirs := []string{home}
	made := map[string]bool{}
	for _, x := range xdgDirs {
		for i, c := range x.dir {
			if c == '/' && !made[x.dir[:i]] {
				made[x.dir[:i]] = true
				dirs = append(dirs, home+"/"+x.dir[:i])
			}
		}
		dirs = append(dirs, home+"/"+x.dir)
	}
	return append(dirs, tmp)
}
