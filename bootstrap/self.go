package bootstrap

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"

	"github.com/outposthq/outpost/internal/selfbin"
)

// homer is implemented by targets that have a private home
// (*sandbox.Lease): where a copy of outpost's binary goes.
type homer interface{ Home() string }

// selfDir is where an isolated sandbox gets its copy of outpost's binary,
// relative to its home.
const selfDir = ".outpost/bin"

// installSelf copies a static outpost binary into an isolated sandbox's
// home and returns its path there.
func (i *Installer) installSelf(ctx context.Context, t Target, executable string) (string, error) {
	h, ok := t.(homer)
	if !ok || !path.IsAbs(h.Home()) {
		return "", fmt.Errorf("%w: %s (the sandbox has no home to copy outpost's binary into)", ErrMissing, executable)
	}
	bin, err := i.static(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMissing, executable, err)
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMissing, executable, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMissing, executable, err)
	}
	name := path.Base(executable)
	if name == "." || name == "/" {
		name = "outpost"
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX})
		if err == nil {
			_, err = io.CopyN(tw, f, fi.Size())
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	dir := path.Join(h.Home(), selfDir)
	err = t.CopyIn(ctx, dir, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("copying outpost's binary into the sandbox: %w", err)
	}
	return path.Join(dir, name), nil
}

// static returns the static binary to copy into sandboxes: SelfStatic,
// else the in-sandbox binary (selfbin.LocateOrBuild), else Self when it is
// static.
func (i *Installer) static(ctx context.Context) (string, error) {
	if i.SelfStatic != "" {
		return i.SelfStatic, nil
	}
	p, err := selfbin.LocateOrBuild(ctx, "")
	if err != nil && i.Self != "" && selfbin.Check(i.Self, runtime.GOARCH) == nil {
		return i.Self, nil
	}
	return p, err
}
