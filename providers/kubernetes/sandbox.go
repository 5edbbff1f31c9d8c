package kubernetes

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Sandbox is one lease: one pod. Its home is /outpost/home, its working
// directory /workspace; in its environment HOME, XDG_* and TMPDIR are
// fixed, and PATH starts with outpost's binary directory.
type Sandbox struct {
	driver.Base
	p       *Provider
	id      string // lease id, name of its pod (or of its claim: via=agent-sandbox)
	pod     string // the pod's name
	claim   bool   // a SandboxClaim was made (claim.go)
	uid     int
	gid     int
	host    string // this machine's name, for the pod's annotation
	hostDir string
	shared  []driver.Mount
	policy  bool // a NetworkPolicy denying all traffic was made (egress.go)

	closing atomic.Bool
	procsMu sync.Mutex
	procs   map[*process]bool // started and not yet ended

	wsMu     sync.Mutex
	manifest *workspace.Manifest

	goneMu sync.Mutex
	gone   string // why the pod vanished, once known

	serveMu  sync.Mutex
	serve    *served // the serving exec (serve.go), nil before the first process
	serveOff bool    // no serving exec (it could not start, or the lease is released)
	serveErr error   // why the serving exec could not start, once serveOff says so
}

// ID is the lease id ("outpost-<12 hex>"), also its pod's name (its
// SandboxClaim's with via=agent-sandbox).
func (s *Sandbox) ID() string { return s.id }

// Pod is the name of the lease's pod (its ID, or its Sandbox's name with
// via=agent-sandbox).
func (s *Sandbox) Pod() string { return s.pod }

// Namespace is the pod's namespace.
func (s *Sandbox) Namespace() string { return s.p.ns }

// HostPath maps a host path inside a honored mount (Options.NodeCache).
func (s *Sandbox) HostPath(p string) (string, bool) { return driver.MapMount(s.shared, p) }

func environment() driver.Environment {
	return driver.Environment{
		Fixed:    driver.HomeEnv(layout.HomeDir, layout.TmpDir),
		Defaults: map[string]string{"PATH": path.Dir(layout.BinaryPath) + ":" + layout.DefaultPath, "LANG": "C.UTF-8"},
	}
}

// Open creates the lease's pod, waits until it runs (at most
// StartTimeout) and copies the working directory in. Errors: ErrStart
// naming the cause, ErrForbidden, ErrConfig, ErrUnreachable, the API's;
// on ctx cancel an error wrapping ctx's, and the pod is deleted.
func (p *Provider) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	wd, err := driver.OpenDir(ctx, opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errors.New("kubernetes: the provider is closed")
	}
	img, err := p.resolveImage(ctx)
	if err != nil {
		return nil, err
	}
	o, err := p.ensureOwner(ctx)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	id := "outpost-" + randomHex(6)
	s := &Sandbox{p: p, id: id, pod: id, uid: int(p.opts.UID), gid: int(p.opts.GID), host: host, hostDir: wd, Base: driver.NewBase(layout.HomeDir, layout.Workspace, environment()), procs: map[*process]bool{}}
	s.shared = sharedMounts(&p.opts, opts.Mounts)
	p.mu.Lock()
	p.leases++
	p.mu.Unlock()
	fail := func(err error) (driver.Sandbox, error) {
		s.closing.Store(true)
		s.endServe()
		dctx, cancel := driver.RemovalContext(ctx)
		defer cancel()
		derr := errors.Join(s.deleteLease(dctx), s.deletePolicy(dctx))
		s.released()
		if ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("kubernetes: starting the sandbox: %w", ctx.Err()), derr)
		}
		return nil, errors.Join(err, derr)
	}
	if p.claimed() {
		if err := p.startClaim(ctx, s, o, opts.Egress == driver.EgressGateway, opts.Labels); err != nil {
			return fail(err)
		}
	} else if err := p.startPod(ctx, s, img, o, opts); err != nil {
		var np noPod
		if errors.As(err, &np) {
			s.released()
			return nil, np.err
		}
		return fail(err)
	}
	m := workspace.NewManifest()
	if err := s.untar(ctx, layout.Workspace, func(tw *tar.Writer) error {
		return workspace.Write(ctx, tw, s.hostDir, ".", "", s.uid, s.gid, m)
	}); err != nil {
		return fail(fmt.Errorf("kubernetes: copying %s in: %w", s.hostDir, err))
	}
	s.manifest = m
	return s, nil
}

// noPod is an error of startPod after which there is no pod to delete
// (its NetworkPolicy, if any, is deleted).
type noPod struct{ err error }

func (e noPod) Error() string { return e.err.Error() }

// startPod makes the lease's pod (and, for egress gateway, first its
// NetworkPolicy) and waits until it runs, at most StartTimeout.
func (p *Provider) startPod(ctx context.Context, s *Sandbox, img string, o *owner, opts driver.Options) error {
	if opts.Egress == driver.EgressGateway {
		if err := s.createPolicy(ctx, o, map[string]string{LabelLease: s.id}); err != nil {
			return err
		}
	}
	if _, err := p.api.pods.create(ctx, p.podSpec(s, img, o, opts.Labels)); err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // it may have been made before the request was dropped
		}
		err = p.apiErr(ctx, "creating the pod", err)
		if s.policy {
			dctx, cancel := driver.RemovalContext(ctx)
			defer cancel()
			err = errors.Join(err, s.deletePolicy(dctx))
		}
		return noPod{err}
	}
	_, err := p.waitRunning(ctx, s.id, time.Now().Add(p.opts.StartTimeout), nil)
	return err
}

// released is the end of a sandbox for the provider's count: the last
// one of a closed provider releases its owner Lease.
func (s *Sandbox) released() {
	p := s.p
	p.mu.Lock()
	p.leases--
	last := p.closed && p.leases == 0
	o := p.owner
	p.mu.Unlock()
	if last && o != nil {
		o.release()
	}
}

// Close releases the lease: it stops the processes that still run,
// copies the workspace's changes back (SyncWorkspace) and deletes the
// pod, whatever happened before. It works with an ended ctx (bounded by
// driver.ReleaseTimeout). Errors: driver.ErrVanished (the pod is gone, its changes with
// it), driver.ErrConflict and tarsafe.ErrUnsafe from the copy back, the API's.
func (s *Sandbox) Close(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	defer s.released()
	cctx, cancel := driver.ReleaseContext(ctx)
	defer cancel()
	var errs []error
	s.procsMu.Lock()
	procs := make([]*process, 0, len(s.procs))
	for pr := range s.procs {
		procs = append(procs, pr)
	}
	s.procsMu.Unlock()
	for _, pr := range procs {
		_ = pr.Signal(driver.Kill)
	}
	for _, pr := range procs {
		select {
		case <-pr.Done():
		case <-cctx.Done():
		}
	}
	// The copy back is bounded by its progress, not by the release's
	// deadline (driver.ProgressBound).
	if err := driver.ProgressBound(ctx, s.syncWorkspace); err != nil {
		errs = append(errs, err)
	}
	s.endServe()
	rctx, rcancel := driver.RemovalContext(ctx)
	defer rcancel()
	if err := s.deleteLease(rctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.deletePolicy(rctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteLease deletes the pod at once (no grace: its processes are
// stopped or abandoned), or the claim with via=agent-sandbox. A pod
// already gone is not an error.
func (s *Sandbox) deleteLease(ctx context.Context) error {
	if s.p.claimed() {
		return s.deleteClaim(ctx)
	}
	zero := int64(0)
	err := s.p.api.pods.delete(ctx, s.id, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return s.p.apiErr(ctx, "deleting pod "+s.id, err)
	}
	return nil
}

// SyncWorkspace copies the sandbox's changes to the workspace back to the
// host directory (Close does; a library user holding a lease across turns
// may call it between turns). Only what changed in the sandbox since the
// last copy is written; a path changed on both sides keeps the host's
// version, the sandbox's is written beside it with workspace.ConflictSuffix
// and the error wraps driver.ErrConflict. Unsafe entries and .outpost/ are not
// written (tarsafe.ErrUnsafe). See workspace.Sync.
func (s *Sandbox) SyncWorkspace(ctx context.Context) error {
	return s.syncWorkspace(ctx, nil)
}

// syncWorkspace is SyncWorkspace; wrap, when set, wraps the archive's
// stream (driver.ProgressBound).
func (s *Sandbox) syncWorkspace(ctx context.Context, wrap func(io.Reader) io.Reader) error {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	rc, err := s.tarOut(ctx, layout.Workspace)
	if err != nil {
		if s.Vanished(context.WithoutCancel(ctx)) {
			return fmt.Errorf("kubernetes: %w: %s; its workspace changes are lost", driver.ErrVanished, s.reason())
		}
		return fmt.Errorf("kubernetes: copying the workspace of %s back: %w", s.pod, err)
	}
	defer rc.Close()
	res, err := workspace.Sync(ctx, s.hostDir, path.Base(layout.Workspace), s.manifest, tar.NewReader(driver.Wrapped(rc, wrap)))
	if err != nil {
		if s.Vanished(context.WithoutCancel(ctx)) {
			return fmt.Errorf("kubernetes: %w: %s; its workspace changes are lost", driver.ErrVanished, s.reason())
		}
		return fmt.Errorf("kubernetes: copying the workspace of %s back: %w", s.pod, err)
	}
	s.manifest = res.Manifest
	return res.Err(driver.ErrConflict)
}

// Vanished reports whether the pod was deleted, evicted, ended or lost
// its container behind outpost's back; the reason is kept for errors. It
// implements driver.Vanisher.
func (s *Sandbox) Vanished(ctx context.Context) bool {
	if s.reason() != "" {
		return true
	}
	gctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pod, err := s.p.api.pods.get(gctx, s.pod)
	why := ""
	switch {
	case apierrors.IsNotFound(err):
		why = "pod " + s.pod + " was deleted"
	case err != nil:
		return false // cannot tell
	case pod.DeletionTimestamp != nil:
		why = "pod " + s.pod + " is being deleted"
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		why = fmt.Sprintf("pod %s ended (%s)", s.pod, pod.Status.Phase)
	default:
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == containerName && cs.State.Terminated != nil {
				why = fmt.Sprintf("the sandbox container of pod %s ended: %s", s.pod, cs.State.Terminated.Reason)
			}
		}
	}
	if why == "" {
		return false
	}
	if err == nil && (pod.Status.Reason != "" || pod.Status.Message != "") {
		why += ": " + strings.TrimSpace(pod.Status.Reason+" "+pod.Status.Message)
	}
	s.goneMu.Lock()
	if s.gone == "" {
		s.gone = why
	}
	s.goneMu.Unlock()
	return true
}

func (s *Sandbox) reason() string {
	s.goneMu.Lock()
	defer s.goneMu.Unlock()
	return s.gone
}
