package ssh

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/driver/settings"
)

// Errors of the provider. Configuration problems (a host key that is not
// known or changed, a key the server refuses, a host without tar) are
// *outpost.Error values of code configuration wrapping them; the rest the
// lease reports with code sandbox.
var (
	// ErrHostKey: the host's key is not in known_hosts, or differs from
	// the one there. The message shows the key's fingerprint and how to
	// accept it.
	ErrHostKey = errors.New("ssh: host key not verified")
	// ErrAuth: the server accepted none of the offered keys.
	ErrAuth = errors.New("ssh: authentication refused")
	// ErrUnreachable: no SSH server answered within the dial timeout. It
	// is the driver's sentinel, which the errors wrap with the provider's
	// name ("ssh: host unreachable: ...").
	ErrUnreachable = driver.ErrUnreachable
	// ErrRemote: the remote host lacks something outpost needs (sh, tar,
	// a writable root directory, a supported architecture).
	ErrRemote = errors.New("ssh: the remote host cannot run sandboxes")
)

// Defaults of Options.
const (
	DefaultPort = 22
	DefaultRoot = "~/.outpost"
	// DefaultStartTimeout bounds connecting, the handshake and the
	// authentication: 30 s, as sshd forks and re-executes itself for
	// every connection, which a loaded host makes slow (at load 46 on two
	// cores, three handshakes here took over 10 s, the old default; the
	// server's own LoginGraceTime is 120 s).
	DefaultStartTimeout = 30 * time.Second
	DefaultKeepAlive    = 15 * time.Second
	// keepAliveMisses is how many keepalives may go unanswered before the
	// connection is declared dead.
	keepAliveMisses = 3
)

// WorkspaceMode says how the caller's working directory reaches the
// remote host.
type WorkspaceMode string

const (
	// Copy copies the caller's directory into the lease (under its
	// directory on the remote host) and the sandbox's changes back on
	// release, conflict-safe (see Sandbox.SyncWorkspace). The default.
	Copy WorkspaceMode = "copy"
	// Remote uses Options.Workdir, a directory on the remote host, as the
	// working directory: nothing is copied either way.
	Remote WorkspaceMode = "remote"
)

// Options configure the provider.
type Options struct {
	// Host is [user@]host[:port], or a Host alias of the ssh config file,
	// whose HostName, Port, User and IdentityFile apply. Required.
	Host string
	// User overrides the user of Host and of the ssh config. Default: the
	// config's, else the local user's name.
	User string
	// Port overrides the port. Default: Host's, else the config's, else 22.
	Port int
	// Identity is a private key file (unencrypted; keys with a passphrase
	// go through an agent). Default: the config's IdentityFile entries,
	// else ~/.ssh/id_ed25519, id_ecdsa and id_rsa, those that exist.
	Identity string
	// Agent authenticates with the keys of the agent at $SSH_AUTH_SOCK
	// (tried before Identity).
	Agent bool
	// KnownHosts is the known_hosts file the host's key is verified
	// against, always. Default: ~/.ssh/known_hosts.
	KnownHosts string
	// Config is the ssh client config file read for host aliases.
	// Default: ~/.ssh/config when it exists; "none" reads none.
	Config string
	// Root is the provider's directory on the remote host, made 0700: it
	// holds outpost's binary and the bootstrap trees (by digest) and the
	// leases' directories. Absolute, or relative to the remote home with
	// "~/". Default DefaultRoot.
	Root string
	// Workspace is how the working directory reaches the host; default
	// Copy.
	Workspace WorkspaceMode
	// Workdir is the working directory on the remote host in Remote mode.
	Workdir string
	// StartTimeout bounds connecting, the SSH handshake and
	// authentication. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// KeepAlive is the interval of keepalive requests; after 3 intervals
	// in a row with one unanswered and nothing else from the server, the
	// connection is closed and its leases fail with driver.ErrDisconnected.
	// Default DefaultKeepAlive; negative: none.
	KeepAlive time.Duration
	// Binary is a static outpost binary for the remote host's
	// architecture (copied once per host, by digest). Default:
	// selfbin.LocateOrBuild, as for the docker provider.
	Binary string
	// Environ is the local environment ($HOME, $USER, $SSH_AUTH_SOCK are
	// read from it). Default: os.Environ().
	Environ []string
	// Isolation runs every process of a lease in bubblewrap's namespaces
	// on the host (isolate.Namespaces), never (isolate.None), or where
	// the host's bwrap works, else without with a degraded notice
	// (isolate.Auto, the default). See isolation.go.
	Isolation string
	// Bwrap is bubblewrap's path on the host; "" finds bwrap on the
	// login PATH.
	Bwrap string
}

// Settings declares the keys sandbox.Open("ssh", settings) accepts
// (docs/sandboxes/ssh.md shows them, generated from here).
var Settings = settings.Set{Provider: "ssh", Keys: []settings.Key{
	settings.Host.With("", "required: `[user@]host[:port]` or a `Host` alias of the ssh config"),
	settings.User.With("$USER", "the login user (default: the config's `User`, then the local user's name)"),
	{Name: "port", Kind: settings.Int, Default: strconv.Itoa(DefaultPort), Doc: "the SSH port (default: the host's, the config's, then 22)"},
	{Name: "identity", Kind: settings.Path, Doc: "a private key file (unencrypted); default: the config's `IdentityFile`, else `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`"},
	{Name: "agent", Kind: settings.Bool, Default: "false", Doc: "authenticate with the keys of the agent at `$SSH_AUTH_SOCK` (tried first)"},
	{Name: "known_hosts", Kind: settings.Path, Default: "~/.ssh/known_hosts", Doc: "the file the host's key is verified against, always"},
	{Name: "config", Kind: settings.Path, Default: "~/.ssh/config", Doc: "the ssh config file read for host aliases; `none` reads none"},
	settings.Root.With(DefaultRoot, "on the remote host, made 0700: outpost's binary, the bootstrap trees and the leases' directories; absolute or `~/`"),
	settings.Workspace.Only(string(Copy), string(Remote)).With(string(Copy), "`remote` works in `workdir` on the host, nothing copied"),
	{Name: "workdir", Kind: settings.Path, Doc: "the remote working directory (with `workspace=remote`)"},
	settings.StartTimeout.With(DefaultStartTimeout.String(), "connecting, the SSH handshake and authentication"),
	{Name: "keepalive", Kind: settings.Duration, None: true, Default: DefaultKeepAlive.String(), Doc: "interval of keepalive requests; three intervals in a row with a keepalive unanswered and nothing else from the server close the connection"},
	settings.Binary.With("", "for the remote host's architecture; copied once per host, by digest"),
	{Name: "isolation", Kind: settings.Enum, Values: []string{isolate.Auto, isolate.Namespaces, isolate.None}, Default: isolate.Auto,
		Doc: "namespaces: every process in bubblewrap's namespaces on the host (as the local provider's); none: processes as the host's user; auto: namespaces where the host's bwrap works, else none with a degraded notice"},
	{Name: "bwrap", Kind: settings.String, Doc: "bubblewrap's path on the host (default: `bwrap` on the login PATH)"},
}}

func init() { driver.Register("ssh", driver.NewFactory(ParseSettings, New)) }

// ParseSettings turns sandbox.Open's string settings into Options.
var ParseSettings = settings.Decoder(Settings, options)

// options builds Options from parsed settings.
func options(v settings.Values) (*Options, error) {
	return &Options{
		Host: v.String("host"), User: v.String("user"), Port: int(v.Int("port")), Identity: v.String("identity"),
		Agent: v.Bool("agent"), KnownHosts: v.String("known_hosts"), Config: v.String("config"), Root: v.String("root"),
		Workspace: WorkspaceMode(v.String("workspace")), Workdir: v.String("workdir"),
		StartTimeout: v.Duration("start_timeout"), KeepAlive: v.Duration("keepalive"), Binary: v.String("binary"),
		Isolation: v.String("isolation"), Bwrap: v.String("bwrap"),
	}, nil
}

// Provider is the ssh provider: one connection to one host, shared by
// its leases. It is safe for concurrent use.
type Provider struct {
	opts Options
	tgt  target // the resolved destination

	mu     sync.Mutex
	conn   *conn // nil until an Open connects, and after it dropped
	dialMu sync.Mutex
	swept  bool
	closed bool

	treeMu sync.Mutex
	trees  map[string]*sync.Mutex // by tree name: one mirror at a time

	isoMu     sync.Mutex
	isoFailed time.Time // when isolationState last failed to connect
	isoWhy    string
}

// New returns an ssh provider. It checks the options and resolves the
// host (ssh config aliases) but does not connect: the first Open does.
// Option errors are *outpost.Error values of code configuration.
func New(opts *Options) (*Provider, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.Workspace == "" {
		o.Workspace = Copy
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.Isolation == "" {
		o.Isolation = isolate.Auto
	}
	cfgErr := func(format string, a ...any) error {
		return outpost.Errorf(outpost.Configuration, "sandbox", "ssh: "+format, a...)
	}
	switch o.Workspace {
	case Copy:
		if o.Workdir != "" {
			return nil, cfgErr("workdir=%s needs workspace=remote", o.Workdir)
		}
	case Remote:
		if !filepath.IsAbs(o.Workdir) || filepath.Clean(o.Workdir) != o.Workdir {
			return nil, cfgErr("workspace=remote needs workdir, an absolute clean path on the host (got %q)", o.Workdir)
		}
	default:
		return nil, cfgErr("unknown workspace mode %q (copy, remote)", o.Workspace)
	}
	switch o.Isolation {
	case isolate.Auto, isolate.Namespaces, isolate.None:
	default:
		return nil, cfgErr("unknown isolation %q (auto, namespaces, none)", o.Isolation)
	}
	if o.Bwrap != "" && (!filepath.IsAbs(o.Bwrap) || strings.ContainsAny(o.Bwrap, "\x00\n")) {
		return nil, cfgErr("bwrap %q must be an absolute path on the host", o.Bwrap)
	}
	if !strings.HasPrefix(o.Root, "~/") && !filepath.IsAbs(o.Root) || strings.ContainsAny(o.Root, "\x00\n") {
		return nil, cfgErr("root %q must be absolute or start with ~/", o.Root)
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, cfgErr("port %d out of range", o.Port)
	}
	tgt, err := resolve(&o)
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "sandbox", err)
	}
	return &Provider{opts: o, tgt: tgt, trees: map[string]*sync.Mutex{}}, nil
}

// Name returns "ssh".
func (p *Provider) Name() string { return "ssh" }

// Allowlist names the remote login environment's variables passed to
// every process as overridable defaults (as the local provider does with
// the host's).
var Allowlist = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "USER", "LOGNAME"}

// Capabilities: the sandbox is on another machine (isolated from the
// caller's), host files may be copied into its private home, stdin is
// live, and leases keep their state between turns. In namespaces on the
// host (isolation.go) egress is enforced; without, a remote host's
// network is its own: EgressGateway runs as EgressOpen there, reported
// unenforced. With isolation=auto, telling which connects to the host.
func (p *Provider) Capabilities() driver.Capabilities {
	active, _ := p.isolationState()
	mode := driver.IsolationNone
	if active {
		mode = driver.IsolationNamespaces
	}
	return driver.Capabilities{HostFiles: true, Isolated: true, Stdin: true, Persistent: true, FixedEnv: driver.HomeVars(), Egress: active, Isolation: mode}
}

// Options returns the provider's options, defaults applied.
func (p *Provider) Options() Options { return p.opts }

// Address is the resolved destination, user@host:port.
func (p *Provider) Address() string { return p.tgt.user + "@" + p.tgt.addr }

// Close closes the provider's connection. Leases must be closed first.
func (p *Provider) Close() error {
	p.mu.Lock()
	c := p.conn
	p.conn, p.closed = nil, true
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	c.close()
	return nil
}
