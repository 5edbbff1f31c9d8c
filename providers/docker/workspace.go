package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/containerd/errdefs"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
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

// releaseSync is Close's copy back, bounded by its progress
// (driver.ProgressBound), not by the release's deadline.
func (s *Sandbox) releaseSync(ctx context.Context) error {
	err := driver.ProgressBound(ctx, s.syncWorkspace)
	if err != nil && errors.Is(err, driver.ErrStalled) {
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	return err
}

// workspaceOut is the workspace as tar for its copy back. Through the
// init's connection the shim writes it (tar --whole), as the sandbox's
// user: a stream and the walk itself, where the engine's archive endpoint
// runs a process of its own in the container's root. Only a whole tree
// will do (the copy back deletes on the host what the tree lacks), so
// when the user cannot archive all of it (a file the agent made
// unreadable, a fifo) or anything else fails before the first byte, the
// archive endpoint reads it as root, as it always did. Once bytes have
// come, the stream's end is the shim's: a tree cut short is an error of
// the read, never an end (tarStream).
func (s *Sandbox) workspaceOut(ctx context.Context) (io.ReadCloser, error) {
	if rc, ok, err := s.helperTar(ctx, layout.Workspace, shim.WholeTarArgs(layout.BinaryPath, layout.Workspace)[1:]); ok && err == nil {
		s.servedCopies.Add(1)
		return rc, nil
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rc, _, err := s.eng.cli.CopyFromContainer(ctx, s.cid, layout.Workspace)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker: %w: %s is gone; its workspace changes are lost", driver.ErrVanished, s.id)
		}
		return nil, fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	return rc, nil
}

// syncWorkspace is SyncWorkspace; wrap, when set, wraps the archive's
// stream (driver.ProgressBound).
func (s *Sandbox) syncWorkspace(ctx context.Context, wrap func(io.Reader) io.Reader) error {
	if s.mode != Copy {
		return nil
	}
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	s.pristine.Store(false)
	rc, err := s.workspaceOut(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	res, err := workspace.Sync(ctx, s.hostDir, path.Base(layout.Workspace), s.manifest, tar.NewReader(driver.Wrapped(rc, wrap)))
	if err != nil {
		return fmt.Errorf("docker: copying the workspace of %s back: %w", s.id, err)
	}
	s.manifest = res.Manifest
	if err := res.Err(driver.ErrConflict); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}
