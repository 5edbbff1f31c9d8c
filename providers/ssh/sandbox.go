package ssh

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// leasePrefix starts the name of every lease directory.
const leasePrefix = "ssh-"

// Record is the owner record each lease directory carries (its file
// "owner"): who made it, so that a later process can tell whether the
// lease was orphaned.
type Record struct {
	Lease     string            `json:"lease"`
	Owner     owner.Owner       `json:"owner"`
	Created   time.Time         `json:"created"`
	Version   string            `json:"version,omitempty"`
	Workspace WorkspaceMode     `json:"workspace"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Sandbox is one lease: a directory on the remote host. Its home is
// <dir>/home, its working directory <dir>/workspace in copy mode and
// Options.Workdir in remote mode; in its environment HOME, XDG_* and
// TMPDIR are fixed, the allowlisted login variables of the host are
// defaults, and PATH starts with the directory of outpost's binary on the
// host.
type Sandbox struct {
	driver.Base
	p         *Provider
	c         *conn
	id        string
	dir       string // the lease's directory on the host
	runDir    string
	mode      WorkspaceMode
	hostDir   string         // copy mode: the caller's directory
	shared    []driver.Mount // mounts mirrored on demand (trees.go)
	mirrorMu  sync.Mutex
	mirrorErr error // why the last HostPath could not show a directory

	iso     *isolated // nil: processes run as the host's user (isolation.go)
	closing atomic.Bool
	tunnels tunnels // remote port forwards (tunnel.go), ended by Close
	wsMu    sync.Mutex
	wsMan   *workspace.Manifest
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return leasePrefix + hex.EncodeToString(b[:])
}

// ID is the lease's id, also its directory's name.
func (s *Sandbox) ID() string { return s.id }

// Dir is the lease's directory on the host.
func (s *Sandbox) Dir() string { return s.dir }

// Open makes a lease directory on the host (0700, under the provider's
// root), with its owner record, private home and, in copy mode, a copy of
// the caller's working directory, in one round trip. The first Open of a
// provider sweeps the leases of dead owners (see GC).
func (p *Provider) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Sandbox{p: p, id: newID(), mode: p.opts.Workspace}
	if s.mode == Copy {
		wd, err := driver.HostDir(opts.Workdir)
		if err != nil {
			return nil, err
		}
		s.hostDir = wd
	}
	c, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.c = c
	p.sweepOnce(ctx, c)
	s.layout(c.remote, opts)
	if err := s.make(ctx, opts.Labels); err != nil {
		return nil, err
	}
	if c.remote.bwrap != "" {
		s.iso = s.newIsolated(c.remote, opts.Egress)
	}
	return s, nil
}

// layout sets the lease's paths on the host and its environment.
func (s *Sandbox) layout(r remote, opts driver.Options) {
	s.dir = path.Join(r.root, "leases", s.id)
	home := path.Join(s.dir, "home")
	s.runDir = path.Join(s.dir, "run")
	workdir := path.Join(s.dir, "workspace")
	if s.mode == Remote {
		workdir = s.p.opts.Workdir
	}
	s.Base = driver.NewBase(home, workdir, environment(r, home, path.Join(s.dir, "tmp")))
	s.shared = sharedMounts(opts.Mounts)
}

// makeScript is the shell script that makes the lease directory with its
// owner record and home; it removes what it made when a step fails. Exit
// 20: the remote working directory is missing; 21: tar failed.
func (s *Sandbox) makeScript(labels map[string]string) string {
	rec := Record{Lease: s.id, Owner: owner.Self(), Created: time.Now().UTC(), Version: selfbin.Version(), Workspace: s.mode, Labels: labels}
	b, _ := json.Marshal(rec)
	script := fmt.Sprintf(`umask 077
L=%s
mkdir "$L" || exit 1
trap 'rm -rf "$L"' EXIT
cd "$L" || exit 1
mkdir -p %s run || exit 1
printf '%%s\n' %s >owner.tmp && mv owner.tmp owner || exit 1
`, shq(s.dir), strings.Join(driver.HomeDirs("home", "tmp"), " "), shq(string(b)))
	switch s.mode {
	case Copy:
		script += "mkdir workspace && tar -x -p --no-same-owner -C workspace -f - || exit 21\n"
	case Remote:
		script += fmt.Sprintf("[ -d %s ] || exit 20\n", shq(s.Workdir()))
	}
	return script + "trap - EXIT\n"
}

// make runs makeScript on the host in one round trip, feeding it a tar of
// the caller's directory in copy mode. A cancelled make removes what it
// may have made.
func (s *Sandbox) make(ctx context.Context, labels map[string]string) error {
	var stdin *io.PipeReader
	var filled chan error
	if s.mode == Copy {
		stdin, filled = s.feedWorkspace(ctx)
		defer stdin.Close()
	}
	var in io.Reader
	if stdin != nil {
		in = stdin
	}
	res, err := run(ctx, s.c, s.makeScript(labels), in)
	var ferr error
	if filled != nil {
		stdin.CloseWithError(io.ErrClosedPipe)
		if ferr = <-filled; errors.Is(ferr, io.ErrClosedPipe) {
			ferr = nil
		}
	}
	if err != nil {
		if ctx.Err() == nil || errors.Is(err, driver.ErrDisconnected) {
			return fmt.Errorf("ssh: making the lease on %s: %w", s.p.Address(), err)
		}
		// A cancelled open may have made the directory before the session
		// closed: remove it.
		rctx, cancel := driver.RemovalContext(ctx)
		defer cancel()
		_, _ = run(rctx, s.c, "rm -rf "+shq(s.dir), nil)
		return ctx.Err()
	}
	switch {
	case ferr != nil:
		return fmt.Errorf("ssh: copying %s to the host: %w", s.hostDir, ferr)
	case res.code == 20:
		return fmt.Errorf("working directory %s: %w on %s", s.Workdir(), os.ErrNotExist, s.p.Address())
	case res.code == 21:
		return fmt.Errorf("ssh: copying %s to the host: tar: %s", s.hostDir, strings.TrimSpace(string(res.stderr)))
	case res.code != 0:
		return fmt.Errorf("ssh: making the lease directory %s on %s: exit %d: %s", s.dir, s.p.Address(), res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}

// feedWorkspace streams a tar of the caller's directory (recording its
// manifest) into the returned pipe; its end is sent on filled.
func (s *Sandbox) feedWorkspace(ctx context.Context) (*io.PipeReader, chan error) {
	pr, pw := io.Pipe()
	filled := make(chan error, 1)
	m := workspace.NewManifest()
	s.wsMan = m
	go func() {
		tw := tar.NewWriter(pw)
		err := workspace.Write(ctx, tw, s.hostDir, "", "", 0, 0, m)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
		filled <- err
	}()
	return pr, filled
}

// environment is a lease's environment.
func environment(r remote, home, tmp string) driver.Environment {
	env := driver.Environment{
		Fixed:    driver.HomeEnv(home, tmp),
		Defaults: map[string]string{},
	}
	for _, k := range Allowlist {
		if v, ok := r.env[k]; ok {
			env.Defaults[k] = v
		}
	}
	p := env.Defaults["PATH"]
	if p == "" {
		p = "/usr/local/bin:/usr/bin:/bin"
	}
	env.Defaults["PATH"] = r.binDir + ":" + p
	return env
}

// conn returns a live connection for the lease's own work: its own, or,
// when that dropped and the lease is being released, a new one.
func (s *Sandbox) liveConn(ctx context.Context) (*conn, error) {
	if !s.c.dead() {
		return s.c, nil
	}
	return s.p.connect(ctx)
}

// Close releases the lease: it kills the lease's process groups, copies
// the workspace's changes back (copy mode; see SyncWorkspace) and removes
// the lease's directory, whatever happened before. When the connection
// dropped it reconnects to do so. It works with an ended ctx (bounded by
// driver.ReleaseTimeout).
func (s *Sandbox) Close(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	s.tunnels.closeAll()
	cctx, cancel := driver.ReleaseContext(ctx)
	defer cancel()
	c, err := s.liveConn(cctx)
	if err != nil {
		return fmt.Errorf("ssh: releasing %s: %w (its directory %s stays on the host until `outpost gc` finds its owner dead)", s.id, err, s.dir)
	}
	var errs []error
	reap := command(shim.ReapArgs(c.remote.binary, s.runDir)...) + " >/dev/null 2>&1"
	if s.mode == Copy {
		// The copy back is bounded by its progress, not by the release's
		// deadline (driver.ProgressBound).
		err := driver.ProgressBound(ctx, func(pctx context.Context, wrap func(io.Reader) io.Reader) error {
			return s.syncWorkspace(pctx, c, reap+"; ", wrap)
		})
		if err != nil {
			errs = append(errs, err)
		}
		reap = ""
	} else {
		reap += "; "
	}
	rctx, rcancel := driver.RemovalContext(ctx)
	defer rcancel()
	res, err := run(rctx, c, reap+removeCmd(s.dir), nil)
	if err == nil && res.code != 0 {
		err = fmt.Errorf("exit %d: %s", res.code, strings.TrimSpace(string(res.stderr)))
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("ssh: removing %s on the host: %w", s.dir, err))
	}
	return errors.Join(errs...)
}

// removeCmd removes a lease directory, even where an agent made things
// read-only, and once more a second later when a process that was just
// killed wrote into it while it was being removed (an exec shim records
// its program's death by signal in the run directory).
func removeCmd(dir string) string {
	d := shq(dir)
	return fmt.Sprintf("rm -rf %s 2>/dev/null || { chmod -R u+rwx %s 2>/dev/null; rm -rf %s 2>/dev/null; } || { sleep 1; chmod -R u+rwx %s; rm -rf %s; }", d, d, d, d, d)
}

// Vanished reports whether the lease is gone: its connection dropped, or
// its directory was removed behind outpost's back. It implements
// driver.Vanisher.
func (s *Sandbox) Vanished(ctx context.Context) bool {
	if s.closing.Load() {
		return false
	}
	if s.c.dead() {
		return true
	}
	// Gone only when the shell says so: a session that failed to start
	// its shell, or ended without a status (a host short of processes
	// under load, once in CI), does not tell the directory is gone, and
	// taking it for gone turned a slow copy into a vanished sandbox.
	res, err := run(ctx, s.c, "if [ -d "+shq(s.dir)+" ]; then echo present; else echo absent; fi", nil)
	if err != nil {
		return errors.Is(err, driver.ErrDisconnected)
	}
	return res.code == 0 && strings.TrimSpace(string(res.stdout)) == "absent"
}

// Disconnected reports whether the lease's connection dropped.
func (s *Sandbox) Disconnected() bool { return s.c.dead() }
