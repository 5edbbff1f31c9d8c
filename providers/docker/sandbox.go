package docker

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/providers/tunnel"
)

// Sandbox is one lease: one container. Its home is /outpost/home, its
// working directory /workspace; in its environment HOME, XDG_* and TMPDIR
// are fixed, the image's variables are defaults, and PATH starts with
// outpost's binary directory.
type Sandbox struct {
	driver.Base
	p       *Provider
	eng     *engine
	id      string // lease id and container name
	cid     string // engine container id
	user    string
	uid     int // numeric ids of user, owners of what is copied in
	gid     int
	mode    WorkspaceMode
	hostDir string         // the caller's working directory (host side)
	shared  []driver.Mount // host directories bind-mounted read-only (mounts.go)
	egress  driver.Egress  // Options.Egress: gateway means network none

	closing atomic.Bool  // Close has begun: processes ending now were stopped by it
	active  atomic.Int64 // processes started and not yet seen to end

	spareMu   sync.Mutex      // guards the spare fields below (spare.go)
	warm      bool            // keep spares: Warm was called
	spareOff  bool            // Close has dropped the spares: make no more
	spares    []*spare        // the next Starts', made or being made, oldest first
	spareCtx  context.Context // ends with Close: cancels a spare being made
	spareStop context.CancelFunc
	spareWG   sync.WaitGroup // spares being made
	spareRuns atomic.Int64   // requests handed to a spare (tests, diagnostics)

	wsMu     sync.Mutex          // serializes workspace copies back
	manifest *workspace.Manifest // copy mode: the workspace as last copied
	// pristine: copy mode, and nothing that could change the workspace
	// (a process, a copy in, a tunnel, a copy back) has happened since it
	// was copied in: its snapshot is the manifest's (SnapshotWorkspace).
	pristine atomic.Bool

	serve *served      // the connection to the container's init (serve.go); nil without one
	execs atomic.Int64 // execs made through the engine (tests, diagnostics)
	puts  atomic.Int64 // archives copied in through the engine (tests, diagnostics)
	// servedCopies: workspace copies back the shim wrote (workspace.go)
	servedCopies atomic.Int64
	// setup: the init starts as root and lays the sandbox out itself
	// (setup.go) instead of an archive before the start.
	setup bool
}

// ID is the lease id, also the container's name ("outpost-<12 hex>").
func (s *Sandbox) ID() string { return s.id }

// ContainerID is the engine's id of the lease's container.
func (s *Sandbox) ContainerID() string { return s.cid }

// HostWorkdir is the caller's directory the workspace comes from.
func (s *Sandbox) HostWorkdir() string { return s.hostDir }

// Mode is the lease's workspace mode.
func (s *Sandbox) Mode() WorkspaceMode { return s.mode }

// User is the user processes run as.
func (s *Sandbox) User() string { return s.user }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "outpost-" + hex.EncodeToString(b[:])
}

// Open creates and starts the lease's container. It sweeps orphans (see
// GC) beside its own requests, and returns once the sweep has ended.
// Errors: ErrNoEngine when no engine answers, ErrImage when the image is
// unavailable, the working directory's error, the engine's errors; on ctx
// cancel, an error wrapping ctx's, and nothing is left behind.
func (p *Provider) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	wd, err := driver.OpenDir(ctx, opts)
	if err != nil {
		return nil, err
	}
	eng, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	// The sweep's requests run beside the image's, the container's
	// creation and its start; Open returns once it has ended.
	defer p.sweep(ctx, eng)()
	img, err := p.image(ctx, eng, opts.Progress)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{p: p, eng: eng, id: newID(), mode: p.opts.Workspace, hostDir: wd, user: p.opts.User, egress: opts.Egress}
	s.shared = sharedMounts(eng, opts.Mounts)
	if s.user == "" {
		s.user = DefaultUser
		if fi, err := os.Stat(wd); err == nil && s.mode == Bind {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				s.user = fmt.Sprintf("%d:%d", st.Uid, st.Gid)
			}
		}
	}
	s.Base = driver.NewBase(layout.HomeDir, layout.Workspace, environment(img.env))
	s.setup = !p.serveOff && !eng.copyBinary && setupUser(s.user)
	if s.mode == Bind {
		if err := hidePrivateDir(wd); err != nil {
			return nil, err
		}
	}
	cfg, hc := p.containerConfig(eng, s, img, opts.Labels)
	// The create is not cancelled midway: the engine goes on making a
	// container whose request was dropped, and a removal by name that
	// arrives first finds nothing (a cancelled Acquire left containers in
	// state created). A cancelled ctx removes it once it exists.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.ReleaseTimeout)
	created, err := eng.cli.ContainerCreate(cctx, cfg, hc, nil, nil, s.id)
	timedOut := cctx.Err() != nil
	cancel()
	if err != nil {
		if timedOut {
			// Our own bound ran out: the engine may still make it.
			rctx, cancel := driver.RemovalContext(ctx)
			defer cancel()
			if rerr := eng.cli.ContainerRemove(rctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !errdefs.IsNotFound(rerr) {
				return nil, errors.Join(err, fmt.Errorf("docker: removing %s after a create that timed out: %w", s.id, rerr))
			}
		}
		return nil, fmt.Errorf("docker: creating the container (image %s): %w", img.ref, err)
	}
	s.cid = created.ID
	// A ctx that ended during the create removes the container as a failed
	// start does.
	if err = ctx.Err(); err == nil {
		err = s.prepare(ctx)
	}
	if err != nil {
		rctx, cancel := driver.RemovalContext(ctx)
		defer cancel()
		s.closing.Store(true)
		rerr := s.remove(rctx)
		if s.serve != nil {
			s.serve.close()
		}
		if ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("docker: starting the sandbox: %w", ctx.Err()), rerr)
		}
		return nil, errors.Join(err, rerr)
	}
	return s, nil
}

// environment is the provider's environment for an image's variables.
func environment(imageEnv []string) driver.Environment {
	env := driver.Environment{
		Fixed:    driver.HomeEnv(layout.HomeDir, layout.TmpDir),
		Defaults: splitEnv(imageEnv),
	}
	for k := range env.Fixed {
		delete(env.Defaults, k)
	}
	p := env.Defaults["PATH"]
	if p == "" {
		p = layout.DefaultPath
	}
	env.Defaults["PATH"] = path.Dir(layout.BinaryPath) + ":" + p
	return env
}

// containerConfig is the hardened configuration of a lease's container.
func (p *Provider) containerConfig(eng *engine, s *Sandbox, img *imageFacts, extra map[string]string) (*container.Config, *container.HostConfig) {
	o := p.opts
	labels := map[string]string{}
	maps.Copy(labels, extra)
	maps.Copy(labels, self().Labels(LabelPrefix))
	labels[LabelLease] = s.id
	labels[LabelCreated] = time.Now().UTC().Format(time.RFC3339Nano)
	labels[LabelVersion] = selfbin.Version()
	labels[LabelWorkspace] = string(s.mode)
	cfg := &container.Config{
		Image:      img.ref,
		User:       s.user,
		Entrypoint: []string{layout.BinaryPath, shim.Subcommand, "init", shim.ServeFlag},
		// The init serves the lease's processes over its stdin and stdout
		// (serve.go), which the provider attaches before the start.
		OpenStdin:    !p.serveOff,
		AttachStdin:  !p.serveOff,
		AttachStdout: !p.serveOff,
		AttachStderr: !p.serveOff,
		Cmd:          []string{},
		WorkingDir:   layout.Workspace,
		Labels:       labels,
		StopSignal:   "SIGTERM",
	}
	if s.setup {
		// Root until its setup, then the user for good (setup.go).
		cfg.User = "0:0"
		cfg.Entrypoint = append(cfg.Entrypoint, shim.SetupFlag)
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(o.Network),
		CapDrop:        []string{"ALL"},
		CapAdd:         setupCaps(s.setup),
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: o.ReadOnly,
		Mounts:         containerMounts(eng, s),
		LogConfig:      container.LogConfig{Type: "none"},
		IpcMode:        "private",
	}
	if s.egress == driver.EgressGateway {
		// No network at all: its loopback stays, and the tunnel (an exec,
		// not a connection) is its one way out.
		hc.NetworkMode = network.NetworkNone
	}
	if o.ReadOnly {
		hc.Tmpfs = map[string]string{"/tmp": "rw,exec,nosuid,nodev,mode=1777"}
	}
	nm := hc.NetworkMode
	if !nm.IsHost() && !nm.IsNone() && !nm.IsContainer() && versions.GreaterThanOrEqualTo(eng.apiVersion, "1.41") {
		hc.ExtraHosts = []string{"host.docker.internal:host-gateway"}
	}
	o.limit(hc, eng.ncpu)
	return cfg, hc
}

// containerMounts are the state volume, outpost's binary (unless it is
// copied in), the shared host directories and the workspace.
func containerMounts(eng *engine, s *Sandbox) []mount.Mount {
	volLabels := self().Labels(LabelPrefix)
	volLabels[LabelLease] = s.id
	mounts := []mount.Mount{{Type: mount.TypeVolume, Target: layout.StateDir, VolumeOptions: &mount.VolumeOptions{Labels: volLabels}}}
	if !eng.copyBinary {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: eng.binary, Target: layout.BinaryPath, ReadOnly: true})
	}
	mounts = append(mounts, s.bindMounts()...)
	if s.mode != Bind {
		return append(mounts, mount.Mount{Type: mount.TypeVolume, Target: layout.Workspace, VolumeOptions: &mount.VolumeOptions{Labels: volLabels}})
	}
	mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: s.hostDir, Target: layout.Workspace})
	// The directory's .outpost (its .env holds secrets the agent gets
	// only by name, and settings the next turn trusts) is hidden behind
	// an empty read-only tmpfs, and so is its place when there was none
	// (hidePrivateDir made it): an agent must neither read .outpost/.env
	// nor plant one (a base URL of its choosing) for the next turn to read
	// (issue 43). The mount takes the host directory's mode (often 0700)
	// with root as its owner, so the sandbox's user cannot list it: the
	// shim's tar of the workspace leaves it out (spareTar).
	return append(mounts, mount.Mount{Type: mount.TypeTmpfs, Target: layout.Workspace + "/" + PrivateDir, ReadOnly: true})
}

// hidePrivateDir makes sure a bind workspace's host directory has the
// PrivateDir its read-only tmpfs is mounted on, before the container is
// made: an existing directory is kept, a missing one is made empty and
// owned by the directory's owner (not root, as the engine would make it),
// and anything else there (a file, a link) is refused with a
// configuration error, since nothing could be mounted over it.
func hidePrivateDir(hostDir string) error {
	dir := filepath.Join(hostDir, PrivateDir)
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.IsDir() {
			return nil
		}
		return outpost.Errorf(outpost.Configuration, "docker", "%s is not a directory: a bind workspace hides %s/ behind a read-only mount, so it must be one (or absent)", dir, PrivateDir)
	}
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "docker", fmt.Errorf("making %s/ to hide it from the sandbox: %w", PrivateDir, err))
	}
	if fi, err := os.Stat(hostDir); err == nil && os.Geteuid() == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			_ = os.Lchown(dir, int(st.Uid), int(st.Gid))
		}
	}
	return nil
}

// limit sets the memory (no swap on top), CPU and process limits: the
// defaults for zero values (CPU at most ncpu, the engine's), none for
// negative ones.
func (o Options) limit(hc *container.HostConfig, ncpu int) {
	switch {
	case o.Memory == 0:
		hc.Memory = DefaultMemory
	case o.Memory > 0:
		hc.Memory = o.Memory
	}
	if hc.Memory > 0 {
		hc.MemorySwap = hc.Memory
	}
	cpu := o.CPU
	if cpu == 0 {
		cpu = DefaultCPU
		if ncpu > 0 {
			cpu = math.Min(cpu, float64(ncpu))
		}
	}
	if cpu > 0 {
		hc.NanoCPUs = int64(cpu * 1e9)
	}
	pids := o.Pids
	if pids == 0 {
		pids = DefaultPids
	}
	if pids > 0 {
		hc.PidsLimit = &pids
	}
}

// prepare lays out /outpost, copies the workspace in (copy mode) and
// starts the container: with a setup, the init does the first two once
// the container runs (setup.go); else an archive does before the start.
func (s *Sandbox) prepare(ctx context.Context) error {
	if err := s.resolveIDs(ctx); err != nil {
		return err
	}
	if s.setup {
		return s.prepareSetup(ctx)
	}
	m, err := s.layOut(ctx)
	if err != nil {
		return err
	}
	s.manifest = m
	s.attachInit(ctx)
	if err := s.eng.cli.ContainerStart(ctx, s.cid, container.StartOptions{}); err != nil {
		return fmt.Errorf("docker: starting the container: %w", err)
	}
	if s.serve != nil {
		go s.serve.handshake()
	}
	s.pristine.Store(m != nil)
	return nil
}

// layOut lays out /outpost and copies the workspace in (copy mode; the
// manifest of what it copied) with the engine's archive endpoint. With a
// writable root filesystem one archive at / does it all; a read-only one
// takes an archive per volume.
func (s *Sandbox) layOut(ctx context.Context) (*workspace.Manifest, error) {
	var m *workspace.Manifest
	if s.p.opts.ReadOnly {
		if err := s.put(ctx, layout.StateDir, func(tw *tar.Writer) error { return s.writeState(tw, "") }); err != nil {
			return nil, fmt.Errorf("docker: preparing %s: %w", layout.StateDir, err)
		}
		if s.mode == Copy {
			m = workspace.NewManifest()
			if err := s.put(ctx, layout.Workspace, func(tw *tar.Writer) error { return s.writeWorkspace(ctx, tw, "/", "", m) }); err != nil {
				return nil, s.copyInErr(ctx, err)
			}
		}
		return m, nil
	}
	if err := s.put(ctx, "/", func(tw *tar.Writer) error { return s.writeRoot(ctx, tw, &m) }); err != nil {
		return nil, s.copyInErr(ctx, err)
	}
	return m, nil
}

// writeRoot writes, for an archive at /, the layout of /outpost and (copy
// mode) the workspace, whose manifest it sets in *m.
func (s *Sandbox) writeRoot(ctx context.Context, tw *tar.Writer, m **workspace.Manifest) error {
	if err := s.writeState(tw, layout.StateDir[1:]+"/"); err != nil {
		return err
	}
	if s.mode != Copy {
		return nil
	}
	*m = workspace.NewManifest()
	return s.writeWorkspace(ctx, tw, layout.Workspace[1:]+"/", layout.Workspace[1:]+"/", *m)
}

func (s *Sandbox) copyInErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("docker: preparing the sandbox (copying %s in): %w", s.hostDir, err)
}

// put streams the archive fill writes into dst.
func (s *Sandbox) put(ctx context.Context, dst string, fill func(*tar.Writer) error) error {
	s.puts.Add(1)
	return workspace.PipeTar(fill, func(r io.Reader) error {
		return s.eng.cli.CopyToContainer(ctx, s.cid, dst, r, container.CopyToContainerOptions{})
	})
}

// writeState writes the layout of /outpost under prefix ("" when the
// archive goes to /outpost itself): the home, TMPDIR and the run
// directory, the user's; in copy mode the binary, root's.
func (s *Sandbox) writeState(tw *tar.Writer, prefix string) error {
	now := time.Now()
	if prefix != "" {
		if err := tw.WriteHeader(&tar.Header{Name: prefix, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, d := range append(driver.HomeDirs("home", "tmp"), "run") {
		if err := tw.WriteHeader(&tar.Header{Name: prefix + d + "/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: s.uid, Gid: s.gid, ModTime: now, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if !s.eng.copyBinary {
		return nil
	}
	f, err := os.Open(s.eng.binary)
	if err != nil {
		return fmt.Errorf("docker: outpost binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// Root's, so that the sandbox's user cannot replace it.
	if err := tw.WriteHeader(&tar.Header{Name: prefix + "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: prefix + "bin/outpost", Typeflag: tar.TypeReg, Mode: 0o555, Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("%s changed while being copied", s.eng.binary)
	}
	return err
}

// Close releases the lease: in copy mode it stops the container's
// processes (when one still runs) and copies the workspace's changes back
// to the host (see SyncWorkspace), then it removes the container and its
// volumes, whatever happened before. It works with an ended ctx (bounded
// by driver.ReleaseTimeout): a cancelled turn still releases its sandbox. Errors: driver.ErrVanished (copy
// mode: the container is gone, its changes with it), driver.ErrConflict and
// tarsafe.ErrUnsafe from the copy back, the engine's.
func (s *Sandbox) Close(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	// A spare is no process of the lease: it ends first, whatever the mode.
	s.dropSpare()
	cctx, cancel := driver.ReleaseContext(ctx)
	defer cancel()
	var errs []error
	if s.mode == Copy {
		// Copy back from a still sandbox: stop it first, unless nothing it
		// started still runs (every process's group ends with it).
		var err error
		if s.active.Load() > 0 {
			err = s.stop(cctx)
		}
		if err == nil {
			err = s.releaseSync(cctx)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	rctx, rcancel := driver.RemovalContext(ctx)
	defer rcancel()
	if err := s.remove(rctx); err != nil {
		errs = append(errs, err)
	}
	if s.serve != nil {
		s.serve.close()
	}
	return errors.Join(errs...)
}

// stop kills every process of the container and waits until it stopped.
func (s *Sandbox) stop(ctx context.Context) error {
	err := s.eng.cli.ContainerKill(ctx, s.cid, "KILL")
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("docker: %w: %s was removed before its workspace was copied back; its changes are lost", driver.ErrVanished, s.id)
	case err != nil && !errdefs.IsConflict(err): // Conflict: not running
		return fmt.Errorf("docker: stopping %s: %w", s.id, err)
	}
	wait, errc := s.eng.cli.ContainerWait(ctx, s.cid, container.WaitConditionNotRunning)
	select {
	case <-wait:
		return nil
	case err := <-errc:
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("docker: %w: %s was removed before its workspace was copied back; its changes are lost", driver.ErrVanished, s.id)
		}
		return fmt.Errorf("docker: waiting for %s to stop: %w", s.id, err)
	}
}

// remove removes the container and its volumes. A container already gone
// is not an error.
func (s *Sandbox) remove(ctx context.Context) error {
	err := s.eng.cli.ContainerRemove(ctx, s.cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if errdefs.IsConflict(err) {
		// "removal already in progress" (a sweep, a concurrent gc).
		return nil
	}
	return fmt.Errorf("docker: removing %s: %w", s.id, err)
}

// Vanished reports whether the container was removed, or stopped, behind
// outpost's back. It implements driver.Vanisher.
func (s *Sandbox) Vanished(ctx context.Context) bool {
	if s.closing.Load() {
		return false
	}
	ins, err := s.eng.cli.ContainerInspect(ctx, s.cid)
	if errdefs.IsNotFound(err) {
		return true
	}
	if err != nil {
		return false
	}
	return ins.State == nil || !ins.State.Running
}

// Tunnel carries connections made to a loopback address of the container
// to the host over an exec of outpost's binary (providers/tunnel): no port
// on the bridge, no socket, and it works with the network none of
// EgressGateway. It implements driver.Tunneler.
func (s *Sandbox) Tunnel(ctx context.Context) (string, net.Listener, error) {
	s.pristine.Store(false)
	return tunnel.Open(ctx, s, layout.BinaryPath, s.closing.Load)
}

// Inspect returns the engine's view of the lease's container (for tests
// and diagnostics: its hardening is in HostConfig).
func (s *Sandbox) Inspect(ctx context.Context) (container.InspectResponse, error) {
	return s.eng.cli.ContainerInspect(ctx, s.cid)
}
