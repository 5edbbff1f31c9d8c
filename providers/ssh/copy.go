package ssh

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// checkPath refuses relative and unclean paths.
func checkPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("ssh: %w: %q is not an absolute clean path", driver.ErrPath, p)
	}
	return nil
}

// CopyIn extracts a tar stream into dir on the host (created 0700 with
// its missing parents) with the host's tar, over one session. The archive
// is checked and read whole before anything is sent: unsafe entries
// (tarsafe.Check), entries passing through a symbolic link the archive
// made, and special files are refused, and then nothing is written.
// Setuid, setgid and sticky bits are dropped; modes are kept exactly.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if err := checkPath(dir); err != nil {
		return err
	}
	sp := &workspace.Spool{}
	defer sp.Close()
	if err := rewrite(tar.NewWriter(sp), r); err != nil {
		// dir is made even when its content is refused, as a local
		// extraction would.
		_, _ = run(ctx, s.c, "umask 077; mkdir -p "+shq(dir), nil)
		return err
	}
	body, err := sp.Reader()
	if err != nil {
		return err
	}
	d := shq(dir)
	res, err := run(ctx, s.c, fmt.Sprintf("umask 077; mkdir -p %s && exec tar -x -p --no-same-owner -C %s -f -", d, d), body)
	if err != nil {
		return err
	}
	if res.code != 0 {
		return fmt.Errorf("ssh: copying into %s: tar: exit %d: %s", dir, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}

// rewrite copies r's entries to tw, refusing unsafe ones.
func rewrite(tw *tar.Writer, r io.Reader) error {
	err := workspace.Entries(r, func(h *tar.Header, tr *tar.Reader) error {
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return fmt.Errorf("%w: %q is a special file", tarsafe.ErrUnsafe, h.Name)
		}
		if h.Name == "." || h.Name == "./" {
			return nil
		}
		h.Mode &= 0o777
		h.Uid, h.Gid = 0, 0
		return workspace.WriteEntry(tw, h, tr)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// exitMissing is CopyOut's exit status for a missing path.
const exitMissing = 44

// CopyOut streams path (a file, a link or a directory) from the host as
// tar, entries named relative to path's parent, with the host's tar over
// one session. A missing path gives an error satisfying errors.Is(err,
// fs.ErrNotExist); tar failing midway ends the stream with its error.
func (s *Sandbox) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	rc, err := s.copyOut(ctx, p)
	var em *ssh.ExitMissingError
	if errors.As(err, &em) && !s.c.dead() && ctx.Err() == nil {
		// The session ended with no status and nothing read, on a
		// connection still alive (a host short of processes, once in
		// CI): reading is safe to try once more.
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		rc, err = s.copyOut(ctx, p)
	}
	return rc, err
}

// copyOut is one try of CopyOut.
func (s *Sandbox) copyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	sess, err := s.c.newSession()
	if err != nil {
		return nil, err
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, err
	}
	errb := &shim.Limited{N: 64 << 10}
	sess.Stderr = errb
	dir, base := path.Split(p)
	if base == "" {
		dir, base = "/", "."
	}
	cmd := fmt.Sprintf("[ -e %s ] || [ -h %s ] || exit %d; exec tar -C %s -cf - %s", shq(p), shq(p), exitMissing, shq(dir), shq(base))
	if err := sess.Start(cmd); err != nil {
		sess.Close()
		return nil, s.connErr("copying "+p+" out", err)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	br := bufio.NewReaderSize(out, 64<<10)
	if _, err := br.Peek(1); err != nil {
		werr := sess.Wait()
		stop()
		sess.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ee *ssh.ExitError
		if errors.As(werr, &ee) && ee.ExitStatus() == exitMissing {
			return nil, &fs.PathError{Op: "copy out", Path: p, Err: fs.ErrNotExist}
		}
		if werr == nil {
			werr = err
		}
		return nil, s.connErr(fmt.Sprintf("copying %s out (%s)", p, errb.String()), werr)
	}
	return &outStream{r: br, sess: sess, stop: stop, errb: errb, s: s, what: p}, nil
}

// outStream is CopyOut's stream: at its end, tar's exit status.
type outStream struct {
	r    *bufio.Reader
	sess *ssh.Session
	stop func() bool
	errb *shim.Limited
	s    *Sandbox
	what string
	err  error
}

func (o *outStream) Read(b []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.r.Read(b)
	if err == io.EOF {
		if werr := o.sess.Wait(); werr != nil {
			o.err = o.s.connErr(fmt.Sprintf("copying %s out: %s", o.what, o.errb.String()), werr)
			return n, o.err
		}
	}
	if err != nil {
		o.err = err
	}
	return n, err
}

func (o *outStream) Close() error {
	o.stop()
	return o.sess.Close()
}

// SyncWorkspace copies the sandbox's changes to the workspace back to the
// caller's directory (copy mode; a no-op in remote mode), as the docker
// provider does (internal/workspace): only what the sandbox changed since
// the last copy; a path changed on both sides keeps the host's version
// and the sandbox's is written beside it with workspace.ConflictSuffix,
// the error wrapping driver.ErrConflict; escaping entries and .outpost are not
// written (tarsafe.ErrUnsafe). Close calls it after stopping the lease's
// processes; a library user may call it between turns.
func (s *Sandbox) SyncWorkspace(ctx context.Context) error {
	if s.mode != Copy {
		return nil
	}
	c, err := s.liveConn(ctx)
	if err != nil {
		return err
	}
	return s.syncWorkspace(ctx, c, "", nil)
}

// syncWorkspace streams <dir>/workspace back after running pre (a shell
// prefix, e.g. the release's reap) in the same session; wrap, when set,
// wraps the archive's stream (driver.ProgressBound).
func (s *Sandbox) syncWorkspace(ctx context.Context, c *conn, pre string, wrap func(io.Reader) io.Reader) error {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	sess, err := c.newSession()
	if err != nil {
		return fmt.Errorf("ssh: copying the workspace of %s back: %w", s.id, err)
	}
	defer sess.Close()
	out, err := sess.StdoutPipe()
	if err != nil {
		return err
	}
	errb := &shim.Limited{N: 64 << 10}
	sess.Stderr = errb
	if err := sess.Start(pre + "exec tar -C " + shq(s.dir) + " -cf - workspace"); err != nil {
		return fmt.Errorf("ssh: copying the workspace of %s back: %w", s.id, err)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	res, err := workspace.Sync(ctx, s.hostDir, "workspace", s.wsMan, tar.NewReader(driver.Wrapped(out, wrap)))
	werr := sess.Wait()
	if err == nil && werr != nil {
		err = fmt.Errorf("tar: %w: %s", werr, errb.String())
	}
	if err != nil {
		if c.dead() {
			err = fmt.Errorf("ssh: %w: %v", c.lost(), err)
		}
		return fmt.Errorf("ssh: copying the workspace of %s back: %w", s.id, err)
	}
	s.wsMan = res.Manifest
	if err := res.Err(driver.ErrConflict); err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	return nil
}

// List returns the regular files under dir on the host, as clean
// slash-separated paths relative to dir, links neither followed nor
// listed, in one round trip (find). It implements driver.Lister.
func (s *Sandbox) List(ctx context.Context, dir string) ([]string, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	res, err := run(ctx, s.c, fmt.Sprintf("[ -d %s ] || exit %d; cd %s && exec find . -type f -print0", shq(dir), exitMissing, shq(dir)), nil)
	if err != nil {
		return nil, err
	}
	switch res.code {
	case 0:
	case exitMissing:
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	default:
		return nil, fmt.Errorf("ssh: listing %s: exit %d: %s", dir, res.code, strings.TrimSpace(string(res.stderr)))
	}
	var out []string
	for _, f := range strings.Split(string(res.stdout), "\x00") {
		if f = strings.TrimPrefix(f, "./"); f != "" && f != "." {
			out = append(out, path.Clean(f))
		}
	}
	return out, nil
}
