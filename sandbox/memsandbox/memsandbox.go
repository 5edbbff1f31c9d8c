package memsandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os/exec"
	"path"
	"strings"
	"sync"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// Name is the provider's registry name.
const Name = "memory"

// Paths inside every sandbox.
const (
	Home       = "/home/outpost"
	TempDir    = "/tmp"
	DefaultDir = "/work" // the working directory when Options.Workdir is not absolute
	// BinDir is where programs of the table appear to live: LookPath
	// returns BinDir/NAME, and Start accepts NAME or BinDir/NAME.
	BinDir = "/bin"
	// DefaultPath is the PATH of Environment().Defaults.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// errVanished is returned by a sandbox removed with Provider.Remove:
// by Wait of its processes that were running, and by every later
// operation but Close. It wraps driver.ErrVanished.
var errVanished = fmt.Errorf("memsandbox: %w", driver.ErrVanished)

func init() {
	driver.Register(Name, func(settings map[string]string) (driver.Provider, error) {
		for k := range settings {
			return nil, fmt.Errorf("memory: unknown setting %q (it has none)", k)
		}
		return New(nil), nil
	})
}

// Options configure the provider. The zero value is ready to use.
type Options struct {
	// Programs are added to the default programs (Defaults), replacing
	// those of the same name; a nil Program removes one. A key is a bare
	// name (found as NAME and BinDir/NAME) or an absolute path (found by
	// that path only).
	Programs map[string]Program
}

// Provider is the in-memory provider. It is safe for concurrent use.
type Provider struct {
	programs map[string]Program

	mu        sync.Mutex
	sandboxes map[string]*Sandbox // open and not removed
	next      int
	opens     int
	live      int
}

// New returns an in-memory provider; nil opts means defaults.
func New(opts *Options) *Provider {
	progs := Defaults()
	if opts != nil {
		for name, prog := range opts.Programs {
			if prog == nil {
				delete(progs, name)
			} else {
				progs[name] = prog
			}
		}
	}
	return &Provider{programs: progs, sandboxes: map[string]*Sandbox{}}
}

// Name returns "memory".
func (p *Provider) Name() string { return Name }

// Close implements driver.Provider: the provider holds nothing beyond its
// sandboxes, so it has nothing to release.
func (p *Provider) Close() error { return nil }

// FixedEnv names the variables the provider defines.
var FixedEnv = []string{"HOME", "TMPDIR"}

// Capabilities: isolated (a sandbox's files are its own), host files may
// be copied in, live stdin, persistent leases.
func (p *Provider) Capabilities() driver.Capabilities {
	return driver.Capabilities{HostFiles: true, Isolated: true, Stdin: true, Persistent: true, FixedEnv: append([]string(nil), FixedEnv...)}
}

// Opens reports how many times Open has been called, including calls that
// failed: zero proves nothing was allocated.
func (p *Provider) Opens() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opens
}

// Live reports how many sandboxes are open: opened and not yet closed.
// A sandbox that vanished (Remove) counts until it is closed.
func (p *Provider) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// Open makes a sandbox with an empty home (Home), TempDir and working
// directory: opts.Workdir when absolute (the host directory's contents are
// not copied), DefaultDir otherwise. A cancelled ctx allocates nothing.
func (p *Provider) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	p.mu.Lock()
	p.opens++
	p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wd := DefaultDir
	if w := strings.ReplaceAll(opts.Workdir, "\\", "/"); path.IsAbs(w) {
		wd = path.Clean(w)
	}
	t := newTree()
	for _, d := range []struct {
		dir  string
		perm fs.FileMode
	}{{BinDir, 0o755}, {TempDir, 0o777}, {Home, 0o700}, {wd, 0o755}} {
		if _, err := t.mkdirAll(d.dir, d.perm); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	sb := &Sandbox{
		provider: p,
		id:       fmt.Sprintf("memory-%d", p.next),
		workdir:  wd,
		labels:   maps.Clone(opts.Labels),
		fs:       t,
		procs:    map[*process]bool{},
	}
	p.sandboxes[sb.id] = sb
	p.live++
	return sb, nil
}

// Remove makes the sandbox id vanish behind its users' back, as a
// container deleted by someone else: its running processes are killed and
// their Wait returns errVanished, its files are gone, every later
// operation fails with errVanished and Vanished reports true. The lease
// must still be closed. An unknown id gives an error wrapping
// fs.ErrNotExist.
func (p *Provider) Remove(id string) error {
	p.mu.Lock()
	sb, ok := p.sandboxes[id]
	delete(p.sandboxes, id)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("memory: sandbox %q: %w", id, fs.ErrNotExist)
	}
	sb.end(errVanished)
	return nil
}

// lookup finds a program by the name a request or LookPath gives, and the
// path it appears at.
func (p *Provider) lookup(name string) (Program, string, bool) {
	if prog, ok := p.programs[name]; ok {
		if path.IsAbs(name) {
			return prog, name, true
		}
		if !strings.Contains(name, "/") {
			return prog, path.Join(BinDir, name), true
		}
	}
	if path.Dir(name) == BinDir {
		if prog, ok := p.programs[path.Base(name)]; ok {
			return prog, name, true
		}
	}
	return nil, "", false
}

// Sandbox is one in-memory sandbox.
type Sandbox struct {
	provider *Provider
	id       string
	workdir  string
	labels   map[string]string
	fs       *tree

	mu     sync.Mutex
	gone   error // driver.ErrClosed or errVanished once ended
	procs  map[*process]bool
	closed bool
}

// ID returns "memory-N".
func (s *Sandbox) ID() string { return s.id }

// Home returns Home.
func (s *Sandbox) Home() string { return Home }

// Workdir returns the working directory.
func (s *Sandbox) Workdir() string { return s.workdir }

// Labels returns a copy of the labels the sandbox was opened with.
func (s *Sandbox) Labels() map[string]string { return maps.Clone(s.labels) }

// FS returns the sandbox's files, relative names resolved from the root,
// for tests to inspect or prepare.
func (s *Sandbox) FS() *FS { return &FS{t: s.fs, dir: "/"} }

// Environment: HOME and TMPDIR fixed, PATH a default.
func (s *Sandbox) Environment() driver.Environment {
	return driver.Environment{
		Fixed:    map[string]string{"HOME": Home, "TMPDIR": TempDir},
		Defaults: map[string]string{"PATH": DefaultPath},
	}
}

// check reports why the sandbox cannot be used, if it cannot.
func (s *Sandbox) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// Start starts the program named by req.Path (see Options.Programs; PATH
// is not consulted) in req.Dir, which must be an existing directory. A
// missing program gives an *exec.Error wrapping exec.ErrNotFound.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prog, _, ok := s.provider.lookup(req.Path)
	if !ok {
		return nil, &exec.Error{Name: req.Path, Err: exec.ErrNotFound}
	}
	dir := req.Dir
	if dir == "" {
		dir = s.workdir
	}
	fi, err := s.FS().Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	if !fi.IsDir() || !path.IsAbs(dir) {
		return nil, fmt.Errorf("working directory %s is not an absolute directory", dir)
	}
	canon, err := s.canonical(dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone != nil {
		return nil, s.gone
	}
	p := start(s, prog, req, canon)
	s.procs[p] = true
	return p, nil
}

// canonical resolves the links of an absolute directory.
func (s *Sandbox) canonical(dir string) (string, error) {
	if err := s.fs.lock(); err != nil {
		return "", err
	}
	defer s.fs.mu.Unlock()
	p, _, err := s.fs.walk("/", dir, walkMode{follow: true})
	return p, pathErr("chdir", dir, err)
}

// forget drops an ended process group.
func (s *Sandbox) forget(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, p)
}

// LookPath finds a program of the table: a bare name as BinDir/NAME, an
// absolute path as itself. pathEnv is not consulted.
func (s *Sandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if _, p, ok := s.provider.lookup(name); ok {
		return p, nil
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// CopyIn extracts a tar stream into dir (absolute, created with mode 0700
// if missing). Every entry is checked with tarsafe.Check, and resolved
// inside dir: links met on the way are followed only while they stay
// inside, and a link entry whose target leads outside is refused, all with
// errors wrapping tarsafe.ErrUnsafe. Entries before a refused one stay
// written.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !path.IsAbs(dir) {
		return pathErr("copyin", dir, errNotAbs)
	}
	dest, err := s.fs.mkdirAll(dir, 0o700)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for h, err := range tarsafe.Entries(ctx, tr) {
		if err != nil {
			return err
		}
		if err := tarsafe.Check(h); err != nil {
			return err
		}
		if h.Name == "." {
			continue
		}
		var data []byte
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			if data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("reading %s: %w", h.Name, err)
			}
		}
		if h.Typeflag == tar.TypeDir && h.Mode == 0 {
			h.Mode = 0o700
		}
		if err := s.fs.extract(dest, h, data); err != nil {
			return err
		}
	}
	return nil
}

// CopyOut returns a tar stream of path and everything below it, as it was
// when CopyOut was called, entries named relative to path's parent (a
// final symbolic link is stored as a link). A missing path gives an
// *fs.PathError wrapping fs.ErrNotExist.
func (s *Sandbox) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	entries, err := s.entries(ctx, p)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(ctx, pw, entries)) }()
	return pr, nil
}

// entries is p and everything below it, as tree.snapshot gives them, in
// a sandbox still there.
func (s *Sandbox) entries(ctx context.Context, p string) ([]entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.fs.snapshot(p)
}

func writeTar(ctx context.Context, w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := &tar.Header{Name: e.name, Mode: unixMode(e.n.mode), ModTime: e.n.mtime, Format: tar.FormatPAX}
		switch {
		case e.n.isDir():
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case e.n.isSymlink():
			h.Typeflag = tar.TypeSymlink
			h.Linkname = e.n.target
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.n.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.n.data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// Vanished reports whether the sandbox was removed (Provider.Remove).
func (s *Sandbox) Vanished(context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Is(s.gone, errVanished)
}

// Close kills the sandbox's processes and drops its files. It ignores
// ctx: releasing never fails, even when the turn's deadline has passed,
// and closing a vanished sandbox is fine. Later calls do nothing.
func (s *Sandbox) Close(context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.end(driver.ErrClosed)
	s.provider.mu.Lock()
	delete(s.provider.sandboxes, s.id)
	s.provider.live--
	s.provider.mu.Unlock()
	return nil
}

// end stops everything once: processes are killed (their Wait reporting
// err if it is errVanished), files dropped, and later operations fail with
// err.
func (s *Sandbox) end(err error) {
	s.mu.Lock()
	if s.gone != nil {
		s.mu.Unlock()
		return
	}
	s.gone = err
	procs := make([]*process, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	var waitErr error
	if errors.Is(err, errVanished) {
		waitErr = err
	}
	for _, p := range procs {
		p.kill(waitErr)
	}
	s.fs.close(err)
}
