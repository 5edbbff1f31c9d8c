package kubernetes

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/workspace"
)

// CopyIn extracts a tar stream into dir (made with its parents, mode
// 0700), through the shim's untar mode: files belong to the sandbox's
// user, setuid/setgid/sticky bits are dropped, and no entry or link met
// on the way writes outside dir. The archive is read and checked whole
// before anything is sent, so an archive that fails writes nothing.
// Errors: tarsafe.ErrUnsafe, driver.ErrVanished, the archive's.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	sp := &workspace.Spool{}
	defer sp.Close()
	if err := workspace.CheckArchive(r, sp); err != nil {
		return err
	}
	body, err := sp.Reader()
	if err != nil {
		return err
	}
	return s.untarFrom(ctx, dir, body)
}

// untar streams the archive fill writes into dir.
func (s *Sandbox) untar(ctx context.Context, dir string, fill func(*tar.Writer) error) error {
	return workspace.PipeTar(fill, func(r io.Reader) error { return s.untarFrom(ctx, dir, r) })
}

func (s *Sandbox) untarFrom(ctx context.Context, dir string, r io.Reader) error {
	res, err := s.run(ctx, shim.UntarArgs(layout.BinaryPath, dir), r)
	if err != nil {
		return err
	}
	switch res.code {
	case 0:
		return nil
	case shim.ExitUnsafe:
		return fmt.Errorf("kubernetes: copying into %s: %w: %s", dir, tarsafe.ErrUnsafe, strings.TrimSpace(string(res.stderr)))
	}
	return fmt.Errorf("kubernetes: copying into %s: exit %d: %s", dir, res.code, strings.TrimSpace(string(res.stderr)))
}

// CopyOut streams p (a file, a link or a directory) as tar, entries named
// relative to p's parent. A missing p gives an error satisfying
// errors.Is(err, fs.ErrNotExist).
func (s *Sandbox) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	return s.tarOut(ctx, p)
}

// tarOut runs the shim's tar mode on p and returns its output once it
// has started (or the error, when p is missing or the exec fails).
func (s *Sandbox) tarOut(ctx context.Context, p string) (io.ReadCloser, error) {
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	errb := &shim.Limited{N: 64 << 10}
	go func() {
		code, err := exitCode(s.stream(sctx, shim.TarArgs(layout.BinaryPath, p), nil, pw, errb))
		switch {
		case err != nil:
			err = s.execErr(sctx, "copying "+p+" out", err)
		case code == shim.ExitMissing:
			err = &fs.PathError{Op: "copy out", Path: p, Err: fs.ErrNotExist}
		case code != 0:
			err = fmt.Errorf("kubernetes: copying %s out: exit %d: %s", p, code, errb.String())
		}
		pw.CloseWithError(err)
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	if _, err := br.Peek(1); err != nil {
		cancel()
		pr.Close()
		if err == io.EOF {
			err = fmt.Errorf("kubernetes: copying %s out: no output", p)
		}
		return nil, err
	}
	return &outStream{Reader: br, pr: pr, cancel: cancel}, nil
}

type outStream struct {
	io.Reader
	pr     *io.PipeReader
	cancel context.CancelFunc
}

func (o *outStream) Close() error {
	o.cancel()
	return o.pr.Close()
}
