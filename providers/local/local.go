// Package local is the sandbox provider that runs agents as processes on
// the host, each lease in a private home directory.
//
// A lease gets a fresh home (mode 0700) under the provider's base
// directory; HOME, the XDG directories and TMPDIR point inside it, and the
// working directory is the caller's. The environment of every process is
// built only from what the turn selected plus a small allowlist taken from
// the host (see Allowlist): the host's environment never leaks in
// wholesale. The home is on the host, so a local sandbox receives only
// variables, never host files (Capabilities.HostFiles is false).
//
// Each process runs in its own process group, recorded in the lease's
// owner file while it runs. On Linux the process is killed by the kernel
// when outpost dies (the parent-death signal), and the first Open of the
// next outpost ends what a dead owner's leases left running (owner.Reap)
// before removing their directories.
//
// The provider registers itself as "local" in the sandbox registry.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outposthq/outpost/internal/lookpath"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/driver/settings"
	"github.com/outposthq/outpost/snapshot"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// Allowlist names the host variables passed to every process as
// overridable defaults. Nothing else of the host environment reaches an
// agent.
var Allowlist = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "USER", "LOGNAME"}

// Settings declares the keys sandbox.Open("local", settings) accepts
// (docs/sandboxes/local.md shows them, generated from here).
var Settings = settings.Set{Provider: "local", Keys: []settings.Key{
	settings.Root.With("$TMPDIR/outpost-<uid>/local", "holds the leases' homes (Options.BaseDir)"),
	{Name: "isolation", Kind: settings.Enum, Values: []string{isolate.Auto, isolate.Namespaces, isolate.None}, Default: isolate.Auto,
		Doc: "namespaces: every process in bubblewrap's namespaces (see Isolation below); none: processes on the host as the user; auto: namespaces where bwrap works, else none with a degraded notice"},
	{Name: "ro", Kind: settings.String, Doc: "more host paths an isolated lease sees read-only (comma-separated, absolute, existing)"},
	{Name: "rw", Kind: settings.String, Doc: "more host paths an isolated lease sees writable (comma-separated, absolute, existing)"},
}}

func init() {
	driver.Register("local", func(m map[string]string) (driver.Provider, error) {
		v, err := Settings.Parse(m)
		if err != nil {
			return nil, err
		}
		p := New(&Options{BaseDir: v.String("root"), Isolation: v.String("isolation"), RO: splitPaths(v.String("ro")), RW: splitPaths(v.String("rw"))})
		if err := p.checkExtra(); err != nil {
			return nil, err
		}
		if _, err := p.isolation(); err != nil {
			return nil, err
		}
		return p, nil
	})
}

// Options configure the provider. The zero value is ready to use.
type Options struct {
	// BaseDir holds the leases' homes. Default: $TMPDIR/outpost-<uid>/local.
	BaseDir string
	// Environ is the host environment the allowlist reads. Default:
	// os.Environ().
	Environ []string
	// Isolation is auto (""), namespaces or none (docs/sandboxes/local.md).
	Isolation string
	// RO and RW are more host paths an isolated lease sees, read-only and
	// writable: absolute, clean, existing.
	RO, RW []string
	// Bwrap is bubblewrap's path; "" finds bwrap on the PATH.
	Bwrap string
}

// Provider is the local provider.
type Provider struct {
	base    string
	environ []string
	sweep   sync.Once

	mode, bwrap string
	ro, rw      []string
	isoOnce     sync.Once
	iso         Isolation
	isoErr      error
	shimMu      sync.Mutex
	shimPath    string
}

// New returns a local provider; nil opts means defaults.
func New(opts *Options) *Provider {
	if opts == nil {
		opts = &Options{}
	}
	p := &Provider{base: opts.BaseDir, environ: opts.Environ, mode: opts.Isolation, bwrap: opts.Bwrap, ro: opts.RO, rw: opts.RW}
	if p.base == "" {
		p.base = filepath.Join(os.TempDir(), fmt.Sprintf("outpost-%d", os.Getuid()), "local")
	}
	if p.environ == nil {
		p.environ = os.Environ()
	}
	return p
}

// Name returns "local".
func (p *Provider) Name() string { return "local" }

// Close implements driver.Provider: the provider holds nothing beyond its
// sandboxes, so it has nothing to release.
func (p *Provider) Close() error { return nil }

// Capabilities: no host files (the home is on the host), the host's paths
// (not Isolated: what a lease sees is at the host's paths, even in
// namespaces), live stdin, persistent leases; egress gateway enforced
// where the leases run in namespaces.
func (p *Provider) Capabilities() driver.Capabilities {
	iso, _ := p.isolation()
	mode := driver.IsolationNone
	if iso.Active {
		mode = driver.IsolationNamespaces
	}
	return driver.Capabilities{HostFiles: false, Isolated: false, Stdin: true, Persistent: true, FixedEnv: driver.HomeVars(), Egress: iso.Active, Isolation: mode}
}

// IsolationNote implements driver.IsolationNoter: why isolation=auto
// runs the leases on the host (bwrap missing or refused), "" otherwise.
func (p *Provider) IsolationNote() string {
	iso, _ := p.isolation()
	if iso.Active || iso.Mode != isolate.Auto || iso.Reason == "" {
		return ""
	}
	return "NOT ISOLATED: isolation=auto runs the leases on the host: " + iso.Reason
}

// Open makes a private home for a new lease. Homes left behind by dead
// processes (SIGKILL) are swept on the first Open of a process.
func (p *Provider) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	iso, err := p.isolation()
	if err != nil {
		return nil, err
	}
	p.sweep.Do(p.sweepOrphans)
	wd, err := driver.HostDir(opts.Workdir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.base, 0o700); err != nil {
		return nil, err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	id := "local-" + hex.EncodeToString(rnd[:])
	dir := filepath.Join(p.base, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	sb := &Sandbox{id: id, dir: dir, running: map[*process]struct{}{}}
	// The owner file sits beside the home, out of the agent's sight.
	if err := sb.writeRecord(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	home := filepath.Join(dir, "home")
	tmp := filepath.Join(home, "tmp")
	for _, d := range driver.HomeDirs(home, tmp) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	env := driver.Environment{
		Fixed:    driver.HomeEnv(home, tmp),
		Defaults: map[string]string{},
	}
	for _, kv := range p.environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, a := range Allowlist {
			if k == a {
				env.Defaults[k] = v
			}
		}
	}
	if env.Defaults["PATH"] == "" {
		env.Defaults["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	sb.Base = driver.NewBase(home, wd, env)
	switch {
	case iso.Active:
		sb.iso = p.newIsolated(iso, home, wd, opts)
		if !sb.iso.spec.Net {
			return tunnelSandbox{sb}, nil
		}
	case iso.Reason != "" && iso.Mode == isolate.Auto && runtime.GOOS == "linux":
		return degradedSandbox{sb, fmt.Errorf("NOT ISOLATED: isolation=auto runs this lease on the host without namespaces (it reads what the user can read; egress unenforced): %s", iso.Reason)}, nil
	}
	return sb, nil
}

// record is a lease's owner file: the process that holds the lease and
// the process groups it started and has not yet waited for.
type record struct {
	Owner  owner.Owner   `json:"owner"`
	Groups []owner.Group `json:"groups,omitempty"`
}

// readRecord reads an owner file, also in the form of earlier versions
// ("PID START": this machine, no groups).
func readRecord(b []byte) (record, bool) {
	var r record
	if json.Unmarshal(b, &r) == nil {
		return r, r.Owner.PID > 0
	}
	me := owner.Self()
	r.Owner = owner.Owner{Boot: me.Boot, PidNS: me.PidNS, Host: me.Host}
	if _, err := fmt.Sscan(string(b), &r.Owner.PID, &r.Owner.Start); err != nil {
		return r, false
	}
	return r, r.Owner.PID > 0
}

// sweepOrphans ends what dead owners left: the processes of their leases
// (owner.Reap: the recorded groups and every process whose HOME is the
// lease's home), then the lease directories.
func (p *Provider) sweepOrphans() { _, _ = p.Collect(context.Background(), driver.CollectOptions{}) }

// Collect implements driver.Collector: it removes the lease directories
// (homes) under the base directory whose owner process is gone, after
// ending the processes the dead owner left in them, or all but this
// process's with All. A directory without an owner record is one being
// made, unless it is older than a minute.
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	col := driver.Collection{Where: p.base}
	entries, err := os.ReadDir(p.base)
	if errors.Is(err, fs.ErrNotExist) {
		return col, nil
	} else if err != nil {
		return col, err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "local-") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return col, err
		}
		o := driver.Orphan{Kind: "home", Name: filepath.Join(p.base, e.Name())}
		doomed := opts.All
		var dead []owner.Group // the groups of a dead owner, to end
		if b, err := os.ReadFile(filepath.Join(o.Name, "owner")); err == nil {
			r, _ := readRecord(b)
			o.Owner, o.State = r.Owner.String(), string(owner.Alive)
			if r.Owner.PID > 0 {
				o.State = string(r.Owner.Liveness())
			}
			if o.State == string(owner.Dead) {
				doomed, dead = true, r.Groups
			}
			doomed = doomed && (r.Owner.PID != os.Getpid() || r.Owner.Start != owner.ProcessStart(os.Getpid()))
		} else if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			doomed = true
		}
		if !doomed {
			col.Kept++
			continue
		}
		if !opts.DryRun {
			if o.State == string(owner.Dead) {
				owner.Reap(dead, "HOME="+filepath.Join(o.Name, "home"))
			}
			if err := os.RemoveAll(o.Name); err != nil {
				o.Error = err.Error()
				errs = append(errs, err)
			} else {
				o.Removed = true
			}
		}
		col.Orphans = append(col.Orphans, o)
	}
	return col, errors.Join(errs...)
}

// writeRecord replaces the lease's owner file with one naming this
// process and the groups running now. The caller holds s.mu or is the
// only one to know s.
func (s *Sandbox) writeRecord() error {
	if s.closed {
		return errors.New("the lease is closed")
	}
	r := record{Owner: owner.Self()}
	for p := range s.running {
		r.Groups = append(r.Groups, p.group)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "owner.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, "owner"))
}

// Sandbox is one local lease.
type Sandbox struct {
	driver.Base // home, workdir, environment
	id, dir     string

	iso *isolated // nil: processes run on the host as they are

	mu      sync.Mutex
	running map[*process]struct{} // started and not yet waited for
	closed  bool                  // Close began: the owner file is no longer written
}

func (s *Sandbox) ID() string { return s.id }

// Start runs a process in its own process group, recorded in the lease's
// owner file until it is waited for.
func (s *Sandbox) Start(ctx context.Context, req driver.ExecRequest) (driver.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := req.Path
	if !strings.Contains(path, "/") {
		lp, err := lookpath.Find(path, req.Env["PATH"])
		if err != nil {
			return nil, err
		}
		path = lp
	}
	dir := req.Dir
	if dir == "" {
		dir = s.Workdir()
	}
	cmd := exec.Command(path, req.Args...)
	var rep *isolate.Reporter
	if s.iso != nil {
		// bwrap with the planned environment only: it passes it on as is.
		a, forwarding, err := s.iso.args(ctx, path, req.Args, dir, req.Env["PATH"])
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(s.iso.bwrap, a...)
		if forwarding {
			// The forwarder, the program's parent inside, tells a death
			// by signal from an exit of 128+n.
			if rep, err = isolate.NewReporter(); err != nil {
				return nil, err
			}
			cmd.ExtraFiles = []*os.File{rep.Child()}
		}
	}
	cmd.Dir = dir
	cmd.Env = make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	p := &process{cmd: cmd, stdout: outR, stderr: errR, rep: rep}
	var inR *os.File
	if req.Stdin {
		var inW *os.File
		if inR, inW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		cmd.Stdin = inR
		p.stdin = inW
	}
	err = start(cmd)
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if rep != nil {
		rep.Started()
	}
	if err != nil {
		if rep != nil {
			rep.Close()
		}
		outR.Close()
		errR.Close()
		if p.stdin != nil {
			p.stdin.Close()
		}
		return nil, err
	}
	p.group = owner.Group{PGID: cmd.Process.Pid, Start: owner.ProcessStart(cmd.Process.Pid)}
	p.sb, p.isolated = s, s.iso != nil
	s.mu.Lock()
	s.running[p] = struct{}{}
	err = s.writeRecord()
	if err != nil {
		delete(s.running, p)
	}
	s.mu.Unlock()
	if err != nil {
		// Unrecorded, the group would outlive a SIGKILL of this process.
		p.Signal(driver.Kill)
		p.cmd.Wait()
		p.Close()
		return nil, fmt.Errorf("recording the process group: %w", err)
	}
	return p, nil
}

// LookPath finds an executable with the sandbox's PATH (or pathEnv).
func (s *Sandbox) LookPath(_ context.Context, name, pathEnv string) (string, error) {
	return lookpath.Find(name, s.SearchPath(pathEnv))
}

type process struct {
	sb             *Sandbox
	cmd            *exec.Cmd
	isolated       bool        // cmd is bwrap: the program runs in its namespaces
	group          owner.Group // its own process group
	stdin          *os.File
	stdout, stderr *os.File
	rep            *isolate.Reporter // the forwarder's report, when it runs the program
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}
func (p *process) Stdout() io.Reader { return p.stdout }
func (p *process) Stderr() io.Reader { return p.stderr }

func (p *process) Wait() (harness.ExitStatus, error) {
	err := p.cmd.Wait()
	p.sb.mu.Lock()
	delete(p.sb.running, p)
	// A stale entry is harmless (the sweep checks the leader's start
	// time), and the directory may be gone with a closed lease.
	_ = p.sb.writeRecord()
	p.sb.mu.Unlock()
	st := harness.ExitStatus{}
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Code = -1
			st.Signal = ws.Signal().String()
		} else {
			st.Code = ps.ExitCode()
		}
		if p.rep != nil {
			if sig, ok := p.rep.Signal(st.Code); ok {
				st = harness.ExitStatus{Code: -1, Signal: sig.String()}
			}
		}
		return st, nil
	}
	return st, err
}

func (p *process) Signal(s driver.Signal) error {
	sig := syscall.SIGTERM
	if s == driver.Kill {
		sig = syscall.SIGKILL
	}
	target := -p.group.PGID
	if p.isolated && sig == syscall.SIGTERM {
		// SIGTERM to bwrap would end it, and its namespace with a
		// SIGKILL (--die-with-parent): the program's group gets it, as
		// on the host. Not yet started: bwrap's group.
		if g := isolate.InnerSession(p.group.PGID); g > 0 {
			target = -g
		}
	}
	err := syscall.Kill(target, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (p *process) Close() error {
	var errs []error
	if p.stdin != nil {
		errs = append(errs, ignoreClosed(p.stdin.Close()))
	}
	errs = append(errs, ignoreClosed(p.stdout.Close()), ignoreClosed(p.stderr.Close()))
	if p.rep != nil {
		p.rep.Close() // read by Wait, or never
	}
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// CopyIn extracts a tar stream into dir through an os.Root: nothing can be
// written outside dir, whatever the archive or the directory's symlinks say.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return tarsafe.Extract(r, dir)
}

// CopyOut streams path (file or directory) as tar, entries named relative
// to path's parent. Symbolic links are stored as links, never followed.
func (s *Sandbox) CopyOut(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.WriteDir(ctx, pw, path)) }()
	return pr, nil
}

// List returns the regular files under dir, relative to it, without
// following links.
func (s *Sandbox) List(ctx context.Context, dir string) ([]string, error) {
	if _, err := os.Lstat(dir); err != nil {
		return nil, err
	}
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	return out, err
}

// SnapshotWorkspace describes the files of the working directory (metadata
// only), skipping .git directories, .outpost and the provider's own
// directory of homes when the working directory holds it. It implements
// driver.Snapshotter.
func (s *Sandbox) SnapshotWorkspace(ctx context.Context, limit int) (snapshot.Snapshot, error) {
	return snapshot.Walk(ctx, s.Workdir(), limit, filepath.Dir(s.dir))
}

// Close removes the lease's home. The working directory is the caller's
// and stays.
func (s *Sandbox) Close(ctx context.Context) error {
	// Kill the groups of processes nobody waited for: releasing a lease
	// releases everything it holds.
	if s.iso != nil {
		s.iso.closeTunnels()
	}
	s.mu.Lock()
	s.closed = true
	for p := range s.running {
		_ = p.Signal(driver.Kill)
	}
	s.mu.Unlock()
	err := os.RemoveAll(s.dir)
	if err != nil && errors.Is(err, fs.ErrPermission) {
		// Agents sometimes write read-only files; make them writable.
		filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, _ error) error {
			os.Chmod(p, 0o700)
			return nil
		})
		err = os.RemoveAll(s.dir)
	}
	return err
}
