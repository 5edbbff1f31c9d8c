package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
)

// The init's setup (shim's Setup). What `docker run` does not do before a
// lease's first process is the layout of /outpost (the home and the run
// directory, the sandbox's user's, on a volume that is root's) and, in
// copy mode, the workspace's copy in. Through the engine's archive
// endpoint that is one request before the start, and the engine runs a
// process of its own to extract it in the container's root, about as long
// as the start itself. Instead the container starts with its init as
// root, allowed only CAP_CHOWN, CAP_SETUID and CAP_SETGID (every other
// capability stays dropped, no-new-privileges stays set); the provider
// sends the same archive as the init's first stream; the init extracts it
// with its owners and becomes the sandbox's user for good, before it
// starts anything. Every process of the lease is then the user's with no
// capability, as before; the capabilities are in the container's bounding
// set only, which no process of the user can raise into (no-new-privileges
// makes setuid and file capabilities inert).
//
// A setup needs the init's connection and a numeric, non-root user (the
// default, DefaultUser): a named user keeps the archive, so that the
// engine resolves its groups as before, and so does root. Should the init
// not serve (a `binary` of an older outpost), the archive goes in once it
// runs, and every process is an exec as that user.

// setupCaps are the capabilities a container adds for its init's setup.
func setupCaps(setup bool) []string {
	if !setup {
		return nil
	}
	return []string{"CHOWN", "SETGID", "SETUID"}
}

// setupUser reports whether user ("uid:gid") can be set up by the init:
// numeric and not root.
func setupUser(user string) bool {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		return false
	}
	uid, err := strconv.Atoi(u)
	if err != nil || uid <= 0 {
		return false
	}
	gid, err := strconv.Atoi(g)
	return err == nil && gid >= 0
}

// prepareSetup starts the container and has its init lay the sandbox out.
func (s *Sandbox) prepareSetup(ctx context.Context) error {
	s.attachInit(ctx)
	if err := s.eng.cli.ContainerStart(ctx, s.cid, container.StartOptions{}); err != nil {
		return fmt.Errorf("docker: starting the container: %w", err)
	}
	if s.serve != nil {
		go s.serve.handshake()
	}
	var m *workspace.Manifest
	served, err := s.runSetup(ctx, func(tw *tar.Writer) error { return s.writeRoot(ctx, tw, &m) })
	if err != nil {
		return err
	}
	if !served {
		if m, err = s.layOut(ctx); err != nil {
			return err
		}
	}
	s.manifest = m
	s.pristine.Store(m != nil)
	return nil
}

// runSetup sends the init its setup with the archive fill writes, and
// waits for the answer. served is false when there is no connection to
// the init (nothing was sent).
func (s *Sandbox) runSetup(ctx context.Context, fill func(*tar.Writer) error) (served bool, err error) {
	sess := s.session(ctx)
	if sess == nil {
		return false, ctx.Err()
	}
	st, err := sess.OpenStream()
	if err != nil {
		return false, nil
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() {
		_ = st.SetWriteDeadline(time.Unix(1, 0))
		_ = st.SetReadDeadline(time.Unix(1, 0))
	})
	defer stop()
	type answer struct {
		code   int
		exited bool
		err    error
	}
	answered := make(chan answer, 1)
	errb := &shim.Limited{N: 4 << 10}
	go func() {
		code, exited, err := shim.ReadFrames(bufio.NewReaderSize(st, 4<<10), io.Discard, errb)
		answered <- answer{code, exited, err}
	}()
	line := shim.SetupLine(shim.Setup{UID: s.uid, GID: s.gid, Env: []string{"HOME=" + layout.HomeDir}})
	werr := workspace.PipeTar(func(tw *tar.Writer) error {
		if err := fill(tw); err != nil {
			return &fillError{err}
		}
		return nil
	}, func(r io.Reader) error {
		if _, err := st.Write(line); err != nil {
			return err
		}
		_, err := io.Copy(st, r)
		return err
	})
	_ = st.Close() // the archive's end; the answer is still read
	a := <-answered
	var fe *fillError
	switch {
	case ctx.Err() != nil:
		return true, ctx.Err()
	case errors.As(werr, &fe):
		return true, s.copyInErr(ctx, fe.err)
	case !a.exited:
		return true, fmt.Errorf("docker: preparing the sandbox: the connection to its init broke: %w", errors.Join(a.err, werr))
	case a.code == shim.ExitUnsafe:
		return true, fmt.Errorf("docker: preparing the sandbox: %s: %w", strings.TrimSpace(errb.String()), tarsafe.ErrUnsafe)
	case a.code != 0:
		return true, fmt.Errorf("docker: preparing the sandbox: %s (exit %d)", strings.TrimSpace(errb.String()), a.code)
	case werr != nil:
		return true, fmt.Errorf("docker: preparing the sandbox: sending the layout: %w", werr)
	}
	return true, nil
}

// fillError is an error of the host's side of the archive (reading the
// workspace), told apart from the connection's.
type fillError struct{ err error }

func (e *fillError) Error() string { return e.err.Error() }
func (e *fillError) Unwrap() error { return e.err }
