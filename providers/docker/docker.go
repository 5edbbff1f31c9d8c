package docker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/driver/settings"

	dockerclient "github.com/docker/docker/client"

	"github.com/outposthq/outpost/internal/selfbin"
)

// Errors of the provider. Each is wrapped with the details; the Lease
// gives them code sandbox.
var (
	// ErrNoEngine: no Docker Engine answers at the address in use; it is
	// also driver.ErrUnreachable.
	ErrNoEngine = driver.Unreachable("docker: no Docker Engine answers")
	// ErrImage: the image is missing and could not be pulled or built.
	ErrImage = errors.New("docker: image not available")
)

// Fix is what the "no engine" error suggests.
const Fix = "start the Docker Engine (in an outpost checkout, as root: scripts/docker-up.sh) or point DOCKER_HOST at one"

// WorkspaceMode says how the caller's working directory reaches the
// container.
type WorkspaceMode string

const (
	// Copy copies the directory into the container when the lease starts
	// and the sandbox's changes back when it is released (or on
	// SyncWorkspace). The default: it works with every engine (remote
	// ones and VM-based desktops too), whatever the host's owners and
	// modes, and the host's directory is untouched while the agent works.
	Copy WorkspaceMode = "copy"
	// Bind bind-mounts the directory: no copying and live changes, but
	// the engine must see the host's filesystem, and the sandbox's user
	// must be allowed to write it (by default it is the directory's owner).
	Bind WorkspaceMode = "bind"
)

// BinaryMode says how outpost's static binary reaches the container.
type BinaryMode string

const (
	// BinaryAuto bind-mounts it when the engine is on this machine (a
	// unix socket), and copies it otherwise.
	BinaryAuto BinaryMode = "auto"
	// BinaryBind bind-mounts it read-only.
	BinaryBind BinaryMode = "bind"
	// BinaryCopy copies it into the container before it starts.
	BinaryCopy BinaryMode = "copy"
)

// PullPolicy says when the image is pulled.
type PullPolicy string

const (
	PullMissing PullPolicy = "missing" // pull when not present (default)
	PullNever   PullPolicy = "never"   // fail when not present
	PullAlways  PullPolicy = "always"  // pull before every lease
)

// Defaults of Options.
const (
	DefaultUser    = "1000:1000"
	DefaultNetwork = "bridge"
	DefaultMemory  = 4 << 30 // bytes, no swap on top
	DefaultCPU     = 2.0     // capped at the engine's CPU count
	DefaultPids    = 1024
	// DefaultSpares is how many spare execs a warm sandbox keeps ready
	// (Sandbox.Warm): one turn's processes (the workspace described
	// before and after, the agent, the capture) each find one.
	DefaultSpares = 4
)

// Options configure the provider. The zero value is ready to use.
type Options struct {
	// Image is the image of every container. Default: MinimalImage, which
	// the provider builds on demand from nothing (no registry needed);
	// enough for the echo agent and static agent CLIs. Real agent CLIs
	// need an image with their userland (docs/sandboxes/docker.md).
	Image string
	// Pull is when the image is pulled; default PullMissing.
	Pull PullPolicy
	// Network is the container's network: "bridge" (default; egress
	// allowed, host.docker.internal resolves to the host), "none",
	// "host", or the name of a user-defined network.
	Network string
	// User is "uid:gid" (or a name the image knows). Default DefaultUser;
	// in Bind mode, the owner of the working directory unless that is root.
	User string
	// Memory is the memory limit in bytes (swap is not added on top).
	// 0: DefaultMemory; negative: no limit.
	Memory int64
	// CPU is the CPU limit in CPUs. 0: DefaultCPU, capped at the
	// engine's CPU count; negative: no limit.
	CPU float64
	// Pids is the process limit. 0: DefaultPids; negative: no limit.
	Pids int64
	// Spares is how many spare execs of the shim a warm sandbox
	// (Sandbox.Warm, as sandbox.Pool warms its sandboxes) keeps waiting.
	// 0: DefaultSpares; negative: none (Warm does nothing).
	Spares int
	// ReadOnly makes the root filesystem read-only; /tmp is then a
	// private tmpfs (exec allowed), and the home and workspace stay
	// writable (volumes).
	ReadOnly bool
	// Workspace is how the working directory reaches the container;
	// default Copy.
	Workspace WorkspaceMode
	// Binary is a static outpost binary for Linux on the engine's
	// architecture. Default: selfbin.LocateOrBuild ($OUTPOST_STATIC_BINARY,
	// outpost-sandbox beside the running executable, for a development
	// build one built from its checkout and cached, then the running
	// executable when static or outpost-static beside it).
	Binary string
	// BinaryMode is how Binary reaches the container; default BinaryAuto.
	BinaryMode BinaryMode
	// Host is the engine's address (e.g. unix:///var/run/docker.sock,
	// tcp://host:2376). Default: $DOCKER_HOST, then the platform's
	// default socket.
	Host string
}

// Settings declares the keys sandbox.Open("docker", settings) accepts
// (docs/sandboxes/docker.md shows them, generated from here).
var Settings = settings.Set{Provider: "docker", Keys: []settings.Key{
	settings.Image.With("outpost/minimal:<digest>", "built on demand from nothing; real agent CLIs need an image with their userland (below)"),
	settings.Pull.With("missing", ""),
	{Name: "network", Kind: settings.String, Default: DefaultNetwork, Doc: "the container's network: `bridge` (egress allowed), `none`, `host`, or a user-defined network's name"},
	settings.User.With(DefaultUser, "`uid:gid` or a user name the image knows; with `workspace=bind`, the working directory's owner unless that is root"),
	settings.Memory.With("4g", "no swap on top"),
	settings.CPU.With("2", "at most the engine's CPUs"),
	{Name: "pids", Kind: settings.Int, None: true, Default: strconv.Itoa(DefaultPids), Doc: "process limit"},
	{Name: "spares", Kind: settings.Int, None: true, Default: strconv.Itoa(DefaultSpares), Doc: "spare execs a warm sandbox keeps ready (`none`: Warm does nothing)"},
	settings.ReadOnly.With("false", "`/tmp` is then a private tmpfs"),
	settings.Workspace.Only(string(Copy), string(Bind)).With(string(Copy), "`bind` bind-mounts the directory (live, no copy; the engine must see the host's files)"),
	settings.Binary.With("", "for Linux on the engine's architecture"),
	{Name: "binary_mode", Kind: settings.Enum, Values: []string{string(BinaryAuto), string(BinaryBind), string(BinaryCopy)}, Default: string(BinaryAuto), Doc: "how the binary reaches the container: `bind` (read-only bind mount), `copy` (copied in before start); `auto` binds on a unix-socket engine and copies otherwise"},
	settings.Host.With("$DOCKER_HOST", "the engine's address: `unix:///var/run/docker.sock`, `tcp://host:2376`"),
}}

func init() { driver.Register("docker", driver.NewFactory(ParseSettings, New)) }

// ParseSettings turns sandbox.Open's string settings into Options.
var ParseSettings = settings.Decoder(Settings, options)

// options builds Options from parsed settings.
func options(v settings.Values) (*Options, error) {
	return &Options{
		Image: v.String("image"), Pull: PullPolicy(v.String("pull")), Network: v.String("network"), User: v.String("user"),
		Memory: v.Int("memory"), CPU: v.Quantity("cpu"), Pids: v.Int("pids"), Spares: int(v.Int("spares")),
		ReadOnly: v.Bool("readonly"), Workspace: WorkspaceMode(v.String("workspace")),
		Binary: v.String("binary"), BinaryMode: BinaryMode(v.String("binary_mode")), Host: v.String("host"),
	}, nil
}

// New returns a docker provider; nil opts means defaults. It checks the
// options but does not contact the engine: the first Open does.
func New(opts *Options) (*Provider, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Pull == "" {
		o.Pull = PullMissing
	}
	if o.Network == "" {
		o.Network = DefaultNetwork
	}
	if o.Workspace == "" {
		o.Workspace = Copy
	}
	if o.BinaryMode == "" {
		o.BinaryMode = BinaryAuto
	}
	switch o.Pull {
	case PullMissing, PullNever, PullAlways:
	default:
		return nil, fmt.Errorf("docker: unknown pull policy %q (missing, never, always)", o.Pull)
	}
	switch o.Workspace {
	case Copy, Bind:
	default:
		return nil, fmt.Errorf("docker: unknown workspace mode %q (copy, bind)", o.Workspace)
	}
	switch o.BinaryMode {
	case BinaryAuto, BinaryBind, BinaryCopy:
	default:
		return nil, fmt.Errorf("docker: unknown binary mode %q (auto, bind, copy)", o.BinaryMode)
	}
	return &Provider{opts: o}, nil
}

// Provider is the docker provider. It is safe for concurrent use.
type Provider struct {
	opts Options

	mu      sync.Mutex
	eng     *engine // nil until an Open reached the engine
	swept   bool
	sweptAt time.Time
	imageMu sync.Mutex
	images  map[string]*imageFacts // by reference, once resolved

	serveOff bool // tests: the init does not serve, every process is an exec
}

// engine is what the provider learned of the engine it talks to.
type engine struct {
	cli        *dockerclient.Client
	host       string // the address, for messages
	arch       string // GOARCH name of the engine's machine
	ncpu       int
	apiVersion string
	local      bool   // a unix socket: host paths can be bind-mounted
	binary     string // the static outpost binary for this engine
	copyBinary bool   // copy it in rather than bind-mount it
}

// Name returns "docker".
func (p *Provider) Name() string { return "docker" }

// Capabilities: host files may be copied into the private home, processes
// are isolated from the host, stdin is live, leases keep state, and
// EgressGateway is enforced (network none; Sandbox.Tunnel is the way out).
func (p *Provider) Capabilities() driver.Capabilities {
	return driver.Capabilities{HostFiles: true, Isolated: true, Stdin: true, Persistent: true, FixedEnv: driver.HomeVars(), Egress: true, Isolation: driver.IsolationContainer}
}

// Options returns the provider's options, defaults applied.
func (p *Provider) Options() Options { return p.opts }

// connect returns the engine, contacting it on first use (and again after
// a failure). Errors wrap ErrNoEngine, or are ctx's.
func (p *Provider) connect(ctx context.Context) (*engine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng != nil {
		return p.eng, nil
	}
	ops := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if p.opts.Host != "" {
		ops = append(ops, dockerclient.WithHost(p.opts.Host))
	}
	cli, err := dockerclient.NewClientWithOpts(ops...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; %s", ErrNoEngine, err, Fix)
	}
	host := cli.DaemonHost()
	where := host
	if os.Getenv("DOCKER_HOST") == "" && p.opts.Host == "" {
		where += " (DOCKER_HOST is not set)"
	}
	// unanswered is the error of a first call the engine did not answer.
	unanswered := func(err error) error {
		cli.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w at %s: %w; %s", ErrNoEngine, where, err, Fix)
	}
	ping, err := cli.Ping(ctx)
	if err != nil {
		return nil, unanswered(err)
	}
	cli.NegotiateAPIVersionPing(ping)
	info, err := cli.Info(ctx)
	if err != nil {
		return nil, unanswered(err)
	}
	e := &engine{cli: cli, host: host, arch: selfbin.Arch(info.Architecture), ncpu: info.NCPU, apiVersion: cli.ClientVersion()}
	if u, err := url.Parse(host); err == nil && (u.Scheme == "unix" || u.Scheme == "npipe") {
		e.local = true
	}
	if info.OSType != "" && info.OSType != "linux" {
		cli.Close()
		return nil, fmt.Errorf("docker: the engine at %s runs %s containers; outpost needs Linux containers", host, info.OSType)
	}
	if p.opts.Binary != "" {
		if err := selfbin.Check(p.opts.Binary, e.arch); err != nil {
			cli.Close()
			return nil, fmt.Errorf("docker: binary %s: %w (it must be a static outpost binary for linux/%s: %s)", p.opts.Binary, err, e.arch, selfbin.Hint)
		}
		e.binary = p.opts.Binary
	} else if e.binary, err = selfbin.LocateOrBuild(ctx, e.arch); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: %w", err)
	}
	switch p.opts.BinaryMode {
	case BinaryCopy:
		e.copyBinary = true
	case BinaryAuto:
		e.copyBinary = !e.local
	}
	p.eng = e
	return e, nil
}

// Close releases the provider's connection to the engine. Leases must be
// closed first.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng == nil {
		return nil
	}
	err := p.eng.cli.Close()
	p.eng = nil
	return err
}
