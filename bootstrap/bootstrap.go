package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/outposthq/outpost/internal/selfbin"
)

// ErrUnknown is returned for a bootstrap name no installer knows.
var ErrUnknown = errors.New("bootstrap: unknown agent")

// ErrMissing is returned when the executable is absent and cannot be
// installed.
var ErrMissing = errors.New("bootstrap: executable not found in the sandbox")

// Known reports whether name is a bootstrap name outpost can install
// with its default pins: one of the embedded pin file (bootstrap/pins.json,
// the only list of built-in bootstrap names), or one the file named by
// $OUTPOST_PINS adds. An Installer with its own Pins answers for itself
// (Installer.Known).
func Known(name string) bool { return (&Installer{}).Known(name) }

// Names lists the bootstrap names of the default pins, sorted.
func Names() []string { return (&Installer{}).Names() }

// Target is what an installer needs of a sandbox. *sandbox.Lease
// satisfies it, and the optional interfaces the installer looks for: a
// Home() string (where isolated sandboxes get their copy), CopyOut (to
// read the sandbox's platform from its dynamic loaders without running
// anything) and Platformer.
type Target interface {
	// Isolated reports whether the sandbox has its own filesystem.
	Isolated() bool
	// LookPath finds an executable on the sandbox's PATH, or checks an
	// absolute path.
	LookPath(ctx context.Context, name string) (string, error)
	// CopyIn extracts a tar stream into dir inside the sandbox.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
}

// Installer installs pinned CLIs. The zero value is ready to use: the
// default pins, cache and registry. It is safe for concurrent use; share
// one between turns.
type Installer struct {
	// Self is the outpost binary used as the echo agent on sandboxes that
	// share the host's filesystem; default outpost-sandbox beside the
	// running executable, else os.Executable().
	Self string
	// SelfStatic, when set, is a statically linked outpost binary copied
	// into isolated sandboxes that lack one. Default: the in-sandbox
	// binary (cmd/outpost-sandbox, found or built by
	// selfbin.LocateOrBuild), else Self when it is static.
	SelfStatic string

	// Pins are what gets installed; nil means DefaultPins() (the embedded
	// pin file with $OUTPOST_PINS over it).
	Pins *Pins
	// CacheDir is the host-side cache; "" means DefaultCacheDir()
	// ($OUTPOST_CACHE/bootstrap or ~/.cache/outpost/bootstrap).
	CacheDir string
	// Registry replaces the pins' npm registry in their URLs; "" means
	// $OUTPOST_NPM_REGISTRY, or the pins' own.
	Registry string
	// Client downloads; nil means a client with connect and response
	// header timeouts (a download itself may take as long as it needs
	// while bytes keep arriving).
	Client *http.Client
	// Attempts is how many times a download is tried when it fails for a
	// reason that may pass (network, server error, truncated body); 0
	// means 3. A digest mismatch is never retried.
	Attempts int
	// Idle fails a download attempt that receives nothing for this long;
	// 0 means one minute.
	Idle time.Duration

	once    sync.Once
	pins    *Pins
	pinsErr error
}

// Source says where an installed CLI came from.
type Source string

const (
	// SourcePath: the executable was already on the sandbox's PATH.
	SourcePath Source = "path"
	// SourceSelf: outpost's own binary (the echo agent).
	SourceSelf Source = "self"
	// SourceSandbox: the pinned CLI was already installed in the sandbox
	// (an earlier turn of the same lease).
	SourceSandbox Source = "sandbox"
	// SourceCache: installed from the host cache, nothing downloaded.
	SourceCache Source = "cache"
	// SourceDownload: downloaded (and verified) for this install.
	SourceDownload Source = "download"
)

// EnsureOptions are per-call settings of Ensure and Install; nil means
// defaults.
type EnsureOptions struct {
	// Progress receives progress reports, from one goroutine at a time:
	// every phase change and, within a phase, byte counts at most once per
	// ProgressInterval (default DefaultProgressInterval).
	Progress         func(Progress)
	ProgressInterval time.Duration
	// Pinned installs the pin even when the executable is on the
	// sandbox's PATH (`outpost bootstrap`).
	Pinned bool
}

// Installed describes an install.
type Installed struct {
	Agent   string `json:"agent"`
	Version string `json:"version"`
	// Path is the executable to run, as the sandbox sees it.
	Path   string `json:"path"`
	Source Source `json:"source"`
	// Platform is the pin's platform key that was installed
	// ("linux-x64"), Artifact its package or file, Digest its SHA-512
	// (SRI form).
	Platform string `json:"platform,omitempty"`
	Artifact string `json:"artifact,omitempty"`
	Digest   string `json:"digest,omitempty"`
	// Downloaded counts the bytes downloaded for this install (0 from
	// the cache).
	Downloaded int64 `json:"downloaded"`
	// Cached is the unpacked artifact in the host cache.
	Cached string `json:"cached,omitempty"`
	// Mounted: the isolated sandbox runs the CLI from the host cache
	// through a read-only mount; nothing was copied into it.
	Mounted bool `json:"mounted,omitempty"`
}

// Ensure makes sure executable (a command name or path) can run in t for
// the agent with bootstrap name, and returns the path to run: the
// executable found on the sandbox's PATH, or else the pinned CLI,
// installed by Install. An empty name installs nothing. Errors: ErrUnknown
// for a name without a pin; ErrMissing when nothing can be installed;
// Install's (a digest mismatch or truncated download is an
// *outpost.Error of code bootstrap with details expected and actual);
// ctx's error when it ends.
func (i *Installer) Ensure(ctx context.Context, t Target, name, executable string, opts *EnsureOptions) (string, error) {
	if opts == nil {
		opts = &EnsureOptions{}
	}
	if name == "" {
		p, err := t.LookPath(ctx, executable)
		if err == nil {
			return p, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("%w: %s (install it in the sandbox or image; its preset names no pinned CLI)", ErrMissing, executable)
	}
	pin, err := i.pin(name)
	if err != nil {
		return "", err
	}
	// Outpost's own binary: on a sandbox sharing the host's filesystem the
	// running executable itself, whatever the PATH holds.
	if pin.Kind == KindSelf && !t.Isolated() {
		return i.self()
	}
	if !opts.Pinned {
		p, err := t.LookPath(ctx, executable)
		if err == nil {
			return p, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
	if pin.Kind == KindSelf {
		return i.installSelf(ctx, t, executable)
	}
	res, err := i.Install(ctx, t, name, opts)
	if err != nil {
		return "", err
	}
	return res.Path, nil
}

// Known reports whether the installer can install bootstrap name: whether
// its pins (Pins, or DefaultPins) have it. The turn engine asks the turn's
// installer before allocating a sandbox.
func (i *Installer) Known(name string) bool {
	_, err := i.pin(name)
	return err == nil
}

// Names lists the bootstrap names the installer can install, sorted.
func (i *Installer) Names() []string {
	p, err := i.loadPins()
	if err != nil {
		return nil
	}
	set := map[string]bool{}
	for _, n := range p.Names() {
		set[n] = true
	}
	for _, n := range selfNames() {
		set[n] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// Cached reports whether name's pin installs a downloaded artifact through
// the host cache (npm and archive pins), the cache an isolated sandbox may
// mount read-only (SharedCache). It is false for outpost's own binary
// (kind self) and for unknown names.
func (i *Installer) Cached(name string) bool {
	pin, err := i.pin(name)
	return err == nil && pin.Kind != KindSelf
}

// Pin returns the installer's pin of bootstrap name.
func (i *Installer) Pin(name string) (*Pin, bool) {
	pin, err := i.pin(name)
	if err != nil {
		return nil, false
	}
	return pin.Clone(), true
}

// pin returns name's pin from the installer's pins. Pins of kind self
// (outpost's own binary) are part of every installer: custom Pins need not
// repeat them.
func (i *Installer) pin(name string) (*Pin, error) {
	p, err := i.loadPins()
	if err != nil {
		return nil, err
	}
	if pin, ok := p.Lookup(name); ok {
		return pin, nil
	}
	if e, err := Embedded(); err == nil {
		if pin, ok := e.Lookup(name); ok && pin.Kind == KindSelf {
			return pin, nil
		}
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, i.Names())
}

// selfNames are the embedded pins of kind self.
func selfNames() []string {
	e, err := Embedded()
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range e.Names() {
		if e.Agents[n].Kind == KindSelf {
			out = append(out, n)
		}
	}
	return out
}

// self is the echo agent on a sandbox sharing the host's filesystem: Self,
// else outpost-sandbox beside the running executable (it starts in a
// millisecond), else the running executable.
func (i *Installer) self() (string, error) {
	if i.Self != "" {
		return i.Self, nil
	}
	if p, ok := selfbin.HostAgent(); ok {
		return p, nil
	}
	return os.Executable()
}

func (i *Installer) loadPins() (*Pins, error) {
	i.once.Do(func() {
		if i.Pins != nil {
			i.pins = i.Pins
			return
		}
		i.pins, i.pinsErr = DefaultPins()
	})
	return i.pins, i.pinsErr
}

func (i *Installer) cache() (*cache, error) {
	dir := i.CacheDir
	if dir == "" {
		var err error
		if dir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	c := &cache{dir: dir, client: i.Client, attempts: i.Attempts, idle: i.Idle, backoff: 500 * time.Millisecond}
	if c.client == nil {
		c.client = defaultClient
	}
	if c.attempts <= 0 {
		c.attempts = 3
	}
	if c.idle <= 0 {
		c.idle = time.Minute
	}
	return c, nil
}

// defaultClient bounds connecting and waiting for headers, not the
// download, which the idle watchdog bounds instead.
var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: time.Minute,
	IdleConnTimeout:       90 * time.Second,
	MaxIdleConns:          8,
}}
