package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/containerd/errdefs"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// PrivateDir is the directory of the caller's working directory that never
// reaches a sandbox (it holds .outpost/.env, whose secrets an agent gets
// only by name): it is not copied in, not copied back, and hidden in bind
// mode.
const PrivateDir = workspace.PrivateDir

// ConflictSuffix is appended to a file's name when the sandbox's version
// is written beside a host version that changed during the lease.
const ConflictSuffix = workspace.ConflictSuffix

// writeWorkspace writes the host directory into tw: the directory itself
// as the entry rootName (the engine applies it to the target directory,
// so that /workspace, a volume made root's, becomes the sandbox user's),
// the rest under prefix, owned by the sandbox's user (workspace.Write).
func (s *Sandbox) writeWorkspace(ctx context.Context, tw *tar.Writer, rootName, prefix string, m *workspace.Manifest) error {
	return workspace.Write(ctx, tw, s.hostDir, rootName, prefix, s.uid, s.gid, m)
}

// SyncWorkspace copies the sandbox's changes to the workspace back to the
// host directory (copy mode; a no-op in bind mode). Close calls it, after
// stopping the processes that still run; a library user holding a lease
// across turns may call it between turns
// (lease.Sandbox().(*docker.Sandbox).SyncWorkspace(ctx)).
//
// Only what changed in the sandbox since the last copy is written: new and
// modified files, directories and links, with their modes and times.
// Paths the sandbox deleted are deleted on the host when the host's copy
// is still the one copied in. A path changed on both sides keeps the
// host's version; the sandbox's is written beside it with ConflictSuffix
// and the error wraps driver.ErrConflict. Entries that would escape the
// directory (absolute or climbing symbolic links) and anything under
// PrivateDir are not written, and the error wraps tarsafe.ErrUnsafe. The
// rest is written in any case. Writes go through an os.Root of the host
// directory: nothing outside it is touched.
func (s *Sandbox) SyncWorkspace(ctx context.Context) error {
	return s.syncWorkspace(ctx, nil)
}

// copyBackIdle bounds a release's copy back by progress: it fails once no
// byte of the archive has arrived for this long, however long it has run
// (a variable for the tests).
var copyBackIdle = driver.ReleaseTimeout

// errCopyBackStalled is the cause of a release's copy back that stopped
// making progress.
var errCopyBackStalled = errors.New("no progress")

// releaseSync is Close's copy back: bounded by progress (copyBackIdle
// without a byte), not by the release's deadline, so that a large
// workspace that takes longer to copy back than the release allows is not
// lost while its bytes still flow. ctx's values are kept; its deadline and
// cancellation are not.
func (s *Sandbox) releaseSync(ctx context.Context) error {
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	idle := copyBackIdle
	timer := time.AfterFunc(idle, func() { cancel(errCopyBackStalled) })
	defer timer.Stop()
	err := s.syncWorkspace(pctx, func() { timer.Reset(idle) })
	if err != nil && errors.Is(context.Cause(pctx), errCopyBackStalled) {
		return fmt.Errorf("docker: copying the workspace of %s back: no byte for %s; the changes not yet copied are lost: %w", s.id, idle, err)
	}
	return err
}

// syncWorkspace is SyncWorkspace; progress, when set, is called as bytes of
// the archive arrive.
func (s *Sandbox) syncWorkspace(ctx context.Context, progress func()) error {
	if s.mode != Copy {
		return nil
	}
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	s.pristine.Store(false)
	rc, _, err := s.eng.cli.CopyFromContainer(ctx, s.cid, layout.Workspace)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("docker: %w: %s is gone; its workspace changes are lost", driver.ErrVanished, s.id)
		}
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if progress != nil {
		r = progressReader{rc, progress}
	}
	res, err := workspace.Sync(ctx, s.hostDir, path.Base(layout.Workspace), s.manifest, tar.NewReader(r))
	if err != nil {
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	s.manifest = res.Manifest
	if err := res.Err(driver.ErrConflict); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
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
