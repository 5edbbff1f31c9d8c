package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// CopyIn extracts a tar stream into dir, creating dir and its missing
// parents (mode 0700). Files belong to the sandbox's user. A warm sandbox
// copies into its home or workspace through the shim's untar mode on a
// spare (helper.go); otherwise the engine's archive endpoint writes the
// container's filesystem. The archive is
// read whole before anything is written, so an archive that fails (an
// unsafe entry the Lease refused, a read error) writes nothing. Errors:
// driver.ErrVanished, the archive's error, the engine's (a read-only
// root filesystem refuses directories outside the home, the workspace and
// /outpost).
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	s.pristine.Store(false)
	if ok, err := s.spareUntar(ctx, dir, r); ok {
		return err
	}
	base, missing, err := s.existingParent(ctx, dir)
	if err != nil {
		return err
	}
	prefix := strings.TrimPrefix(strings.TrimPrefix(dir, base), "/")
	sp := &workspace.Spool{}
	defer sp.Close()
	tw := newTarWriter(sp, s.uid, s.gid)
	for _, d := range missing {
		if err := tw.dir(d, 0o700); err != nil {
			return err
		}
	}
	if err := s.rewrite(ctx, tw, r, base, prefix, missing); err != nil {
		if len(missing) > 0 {
			// dir is made even when its content is refused, as a local
			// extraction would.
			var dirs bytes.Buffer
			dtw := newTarWriter(&dirs, s.uid, s.gid)
			for _, d := range missing {
				_ = dtw.dir(d, 0o700)
			}
			if dtw.Close() == nil {
				_ = s.eng.cli.CopyToContainer(ctx, s.cid, base, &dirs, container.CopyToContainerOptions{})
			}
		}
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	body, err := sp.Reader()
	if err != nil {
		return err
	}
	s.puts.Add(1)
	err = s.eng.cli.CopyToContainer(ctx, s.cid, base, body, container.CopyToContainerOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errdefs.IsNotFound(err) && s.Vanished(context.WithoutCancel(ctx)) {
			return fmt.Errorf("docker: %w: copying into %s: %w", driver.ErrVanished, dir, err)
		}
		return fmt.Errorf("docker: copying into %s: %w", dir, err)
	}
	return nil
}

// rewrite copies the entries of r to tw under prefix, owned by the
// sandbox's user, refusing unsafe ones. Parent directories that exist
// neither in the container (under base) nor in the archive get an entry
// of their own (mode 0700), so that they belong to the sandbox's user too:
// the engine would make them root's.
func (s *Sandbox) rewrite(ctx context.Context, tw tarWriter, r io.Reader, base, prefix string, missing []string) error {
	dirs := map[string]bool{} // directories known to exist, relative to base
	for _, d := range missing {
		dirs[d] = true
	}
	if prefix != "" {
		dirs[prefix] = true
	}
	parents := func(name string) error {
		for i := 0; i < len(name); i++ {
			if name[i] != '/' || dirs[name[:i]] {
				continue
			}
			d := name[:i]
			_, err := s.eng.cli.ContainerStatPath(ctx, s.cid, path.Join(base, d))
			switch {
			case err == nil:
			case errdefs.IsNotFound(err):
				if err := tw.dir(d, 0o700); err != nil {
					return err
				}
			default:
				return fmt.Errorf("docker: copying into %s: %w", path.Join(base, prefix), err)
			}
			dirs[d] = true
		}
		return nil
	}
	// The engine follows links while it extracts: an entry under a link
	// the archive made could land outside dir, however harmless each link
	// looks alone (workspace.Entries refuses it).
	return workspace.Entries(r, func(h *tar.Header, tr *tar.Reader) error {
		h.Name = path.Join(prefix, h.Name)
		if h.Typeflag == tar.TypeLink {
			h.Linkname = path.Join(prefix, h.Linkname)
		}
		if h.Name == "." || h.Name == prefix {
			return nil // dir itself: it exists now or is made above
		}
		if err := parents(h.Name); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeDir {
			dirs[h.Name] = true
			h.Name += "/"
		}
		h.Uid, h.Gid = s.uid, s.gid
		return tw.WriteEntry(h, tr)
	})
}

// existingParent returns the deepest existing directory at or above dir,
// and the path components below it that must be made (relative to it).
func (s *Sandbox) existingParent(ctx context.Context, dir string) (string, []string, error) {
	var below []string
	for p := dir; ; p = path.Dir(p) {
		st, err := s.eng.cli.ContainerStatPath(ctx, s.cid, p)
		if err == nil {
			if !st.Mode.IsDir() && st.Mode&fs.ModeSymlink == 0 {
				return "", nil, fmt.Errorf("docker: copying into %s: %s is not a directory", dir, p)
			}
			missing := make([]string, 0, len(below))
			for i := len(below) - 1; i >= 0; i-- {
				rel := strings.TrimPrefix(strings.TrimPrefix(below[i], p), "/")
				missing = append(missing, rel)
			}
			return p, missing, nil
		}
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		if !errdefs.IsNotFound(err) {
			return "", nil, fmt.Errorf("docker: copying into %s: %w", dir, err)
		}
		if p == "/" {
			// Even / is "missing": the container is gone.
			return "", nil, fmt.Errorf("docker: %w: copying into %s: %w", driver.ErrVanished, dir, err)
		}
		below = append(below, p)
	}
}

// CopyOut streams path (a file, a link or a directory) as tar, entries
// named relative to path's parent. A missing path gives an error
// satisfying errors.Is(err, fs.ErrNotExist). A warm sandbox copies
// through the shim's tar mode on a spare (helper.go), as the sandbox's
// user; otherwise the engine's archive endpoint reads the container's
// filesystem, where mounts that only the container sees (the private /tmp
// of a read-only sandbox) are not visible.
func (s *Sandbox) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	if rc, ok, err := s.spareTar(ctx, p); ok {
		return rc, err
	}
	rc, _, err := s.eng.cli.CopyFromContainer(ctx, s.cid, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errdefs.IsNotFound(err) {
			if s.Vanished(context.WithoutCancel(ctx)) {
				return nil, fmt.Errorf("docker: %w: copying %s out: %w", driver.ErrVanished, p, err)
			}
			return nil, &fs.PathError{Op: "copy out", Path: p, Err: fs.ErrNotExist}
		}
		return nil, fmt.Errorf("docker: copying %s out: %w", p, err)
	}
	return rc, nil
}

// tarWriter writes the provider's own archives, entries owned by uid:gid.
type tarWriter struct {
	*tar.Writer
	uid, gid int
}

func newTarWriter(w io.Writer, uid, gid int) tarWriter { return tarWriter{tar.NewWriter(w), uid, gid} }

// WriteEntry writes h, and a regular file's content from r.
func (t tarWriter) WriteEntry(h *tar.Header, r io.Reader) error {
	return workspace.WriteEntry(t.Writer, h, r)
}

func (t tarWriter) dir(name string, mode int64) error {
	return t.WriteHeader(&tar.Header{Name: strings.TrimSuffix(name, "/") + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: t.uid, Gid: t.gid, ModTime: time.Now(), Format: tar.FormatPAX})
}

func (t tarWriter) file(name string, mode, size int64, mtime time.Time, r io.Reader) error {
	if err := t.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: size, Uid: t.uid, Gid: t.gid, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(t, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while being copied", name)
	}
	return err
}
