package bootstrap

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// MountPath is where an isolated sandbox sees the host cache's unpacked
// CLIs when its provider can mount them (SharedCache).
const MountPath = "/opt/outpost/bootstrap"

// hostPather is implemented by targets that can see host directories
// without copying (*sandbox.Lease, through its provider's mounts).
type hostPather interface {
	HostPath(p string) (string, bool)
}

// hostPathExplainer is a target that can say why HostPath answered false
// (sandbox.Lease: a remote host's mirror that failed).
type hostPathExplainer interface {
	HostPathError(ctx context.Context) error
}

// SharedCache returns the host directory of the cache's unpacked CLIs
// (created if need be) and where an isolated sandbox should mount it,
// read-only: with that mount, Install copies nothing into the sandbox.
func (i *Installer) SharedCache() (host, target string, err error) {
	c, err := i.cache()
	if err != nil {
		return "", "", err
	}
	if err := c.mkdirs(); err != nil {
		return "", "", err
	}
	return c.path("trees", ""), MountPath, nil
}

// SandboxDir is where an isolated sandbox gets its pinned CLIs, relative
// to its home: <home>/.outpost/bootstrap/<name>@<version>/, holding pkg/
// (the package) and bin/<program>, the path Install returns.
const SandboxDir = ".outpost/bootstrap"

// Install installs the pinned CLI of bootstrap name into t, whether or
// not t already has one on its PATH, and says what it did. See the
// package documentation for how. Errors: ErrUnknown (no pin), ErrPlatform
// (no build for the sandbox), an *outpost.Error of code bootstrap with
// details expected and actual for a digest mismatch (ErrDigestMismatch)
// or truncated download (ErrTruncated), ErrDownload for other download
// failures, tarsafe.ErrUnsafe for a hostile archive, the sandbox's copy
// error, ctx's error when it ends. A failed install leaves nothing in the
// cache and nothing in the sandbox that a later install would take for
// complete (the executable's link is copied last).
func (i *Installer) Install(ctx context.Context, t Target, name string, opts *EnsureOptions) (*Installed, error) {
	if opts == nil {
		opts = &EnsureOptions{}
	}
	pin, err := i.pin(name)
	if err != nil {
		return nil, err
	}
	res := &Installed{Agent: name, Version: pin.Version}
	rep := newReporter(func(p Progress) {
		if opts.Progress != nil {
			p.Agent, p.Version = name, pin.Version
			opts.Progress(p)
		}
	}, opts.ProgressInterval)
	if err := i.install(ctx, t, name, pin, res, rep); err != nil {
		return nil, err
	}
	rep.report(Progress{Phase: PhaseDone, Artifact: res.Artifact, Path: res.Path, Source: res.Source, Bytes: res.Downloaded}, true)
	return res, nil
}

// install fills res: outpost's own binary for a self pin; else the copy an
// isolated sandbox has from an earlier turn, or the cached tree (fetched
// when missing) run in place, through the sandbox's mount of the cache,
// or copied into the sandbox.
func (i *Installer) install(ctx context.Context, t Target, name string, pin *Pin, res *Installed, rep *reporter) error {
	if pin.Kind == KindSelf {
		return i.installSelfPin(ctx, t, pin, res)
	}
	c, err := i.cache()
	if err != nil {
		return err
	}
	// An isolated sandbox that sees the cache through a read-only mount
	// runs the CLI from there: nothing is copied. One without such a mount
	// may have a copy from an earlier turn.
	hp, mounted := t.(hostPather)
	if mounted {
		_, mounted = hp.HostPath(c.path("trees", ""))
	}
	var dest string
	if t.Isolated() && !mounted {
		var found bool
		if dest, found, err = earlierCopy(ctx, t, name, pin, res); err != nil || found {
			return err
		}
	}
	f, art, err := i.fetch(ctx, t, c, name, pin, res, rep)
	if err != nil {
		return err
	}
	switch {
	case !t.Isolated():
		res.Path = filepath.Join(f.dir, "bin", pin.Program)
	case mounted:
		// The provider's mount is its promise that the path is there.
		dir, ok := hp.HostPath(f.dir)
		if !ok {
			if x, ok := t.(hostPathExplainer); ok {
				if err := x.HostPathError(ctx); err != nil {
					return fmt.Errorf("showing %s in the sandbox: %w", f.dir, err)
				}
			}
			return fmt.Errorf("%w: %s is in the cache, but the sandbox's mount of the cache does not show it", ErrMissing, f.dir)
		}
		res.Path, res.Mounted = path.Join(dir, "bin", pin.Program), true
	default:
		if err := copyTree(ctx, t, f.dir, dest, pin.Program, rep); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("copying %s into the sandbox: %w", art, err)
		}
		res.Path = path.Join(dest, "bin", pin.Program)
	}
	return nil
}

// installSelfPin installs outpost's own binary: copied into an isolated
// sandbox, this executable otherwise.
func (i *Installer) installSelfPin(ctx context.Context, t Target, pin *Pin, res *Installed) error {
	res.Source = SourceSelf
	var err error
	if t.Isolated() {
		res.Path, err = i.installSelf(ctx, t, pin.Program)
	} else {
		res.Path, err = i.self()
	}
	return err
}

// earlierCopy returns where an isolated sandbox keeps the CLI, and whether
// a copy from an earlier turn is already there (then res says so).
func earlierCopy(ctx context.Context, t Target, name string, pin *Pin, res *Installed) (string, bool, error) {
	h, ok := t.(homer)
	if !ok || !path.IsAbs(h.Home()) {
		return "", false, fmt.Errorf("%w: %s (the sandbox has no home to install into)", ErrMissing, pin.Program)
	}
	dest := path.Join(h.Home(), SandboxDir, name+"@"+pin.Version)
	if p, err := t.LookPath(ctx, path.Join(dest, "bin", pin.Program)); err == nil {
		res.Path, res.Source = p, SourceSandbox
		return dest, true, nil
	}
	return dest, false, ctx.Err()
}

// fetch resolves the pin's artifact for the sandbox's platform and
// returns its unpacked tree in the cache, downloading it when missing,
// with the artifact's name.
func (i *Installer) fetch(ctx context.Context, t Target, c *cache, name string, pin *Pin, res *Installed, rep *reporter) (fetched, string, error) {
	pl, err := detectPlatform(ctx, t)
	if err != nil {
		return fetched{}, "", err
	}
	pins, err := i.loadPins()
	if err != nil {
		return fetched{}, "", err
	}
	r, err := i.resolve(pins, name, pl)
	if err != nil {
		return fetched{}, "", err
	}
	res.Platform, res.Artifact, res.Digest = r.key, r.art.Name(), r.digest.SRI()
	f, err := c.tree(ctx, &r.art, r.digest, r.strip, pin.Program, rep.report)
	res.Downloaded = f.downloaded
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fetched{}, "", fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fetched{}, "", err
	}
	res.Source, res.Cached = f.source, f.dir
	return f, r.art.Name(), nil
}

// resolved is a pin's artifact for one platform, ready to fetch.
type resolved struct {
	key    string
	art    Artifact // URL rewritten for the registry in use
	digest Digest
	strip  int
}

// resolve picks name's artifact for pl.
func (i *Installer) resolve(pins *Pins, name string, pl Platform) (*resolved, error) {
	pin, ok := pins.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w %q (pinned: %v)", ErrUnknown, name, pins.Names())
	}
	if pin.Kind == KindSelf {
		return nil, fmt.Errorf("%s is outpost's own binary: nothing to download", name)
	}
	key, art, err := pin.Select(pl)
	if err != nil {
		return nil, err
	}
	d, err := art.Digest()
	if err != nil {
		return nil, fmt.Errorf("pin %s %s: %w", name, key, err)
	}
	r := &resolved{key: key, art: *art, digest: d, strip: art.Strip}
	if pin.Kind == KindNPM {
		registry := i.Registry
		if registry == "" {
			registry = os.Getenv(RegistryVariable)
		}
		r.art.URL = rewrite(r.art.URL, pins.Registry, registry)
		r.strip = 1 // npm drops the tarball's first component, "package/"
	}
	return r, nil
}

// Prefetch downloads, verifies and unpacks name's pinned artifact for pl
// into the host cache, without any sandbox (`go run ./bootstrap/cmd/pins
// -verify`, warming a CI cache). The result's Path is the executable in
// the cache. Errors are Install's.
func (i *Installer) Prefetch(ctx context.Context, name string, pl Platform, opts *EnsureOptions) (*Installed, error) {
	if opts == nil {
		opts = &EnsureOptions{}
	}
	pins, err := i.loadPins()
	if err != nil {
		return nil, err
	}
	r, err := i.resolve(pins, name, pl)
	if err != nil {
		return nil, err
	}
	pin, _ := pins.Lookup(name)
	rep := newReporter(func(p Progress) {
		if opts.Progress != nil {
			p.Agent, p.Version = name, pin.Version
			opts.Progress(p)
		}
	}, opts.ProgressInterval)
	c, err := i.cache()
	if err != nil {
		return nil, err
	}
	f, err := c.tree(ctx, &r.art, r.digest, r.strip, pin.Program, rep.report)
	res := &Installed{Agent: name, Version: pin.Version, Platform: r.key, Artifact: r.art.Name(), Digest: r.digest.SRI(), Downloaded: f.downloaded}
	if err != nil {
		return nil, err
	}
	res.Source, res.Cached, res.Path = f.source, f.dir, filepath.Join(f.dir, "bin", pin.Program)
	rep.report(Progress{Phase: PhaseDone, Artifact: res.Artifact, Path: res.Path, Source: res.Source, Bytes: res.Downloaded}, true)
	return res, nil
}

// InCache returns the executable of name's pinned CLI for pl when a
// sandbox would install it without downloading anything: unpacked in the
// host cache, or outpost's own binary (kind self). It never downloads or
// creates anything (`outpost agents`, `outpost doctor`).
func (i *Installer) InCache(name string, pl Platform) (string, bool) {
	pin, err := i.pin(name)
	if err != nil {
		return "", false
	}
	if pin.Kind == KindSelf {
		p, err := i.self()
		return p, err == nil
	}
	pins, err := i.loadPins()
	if err != nil {
		return "", false
	}
	r, err := i.resolve(pins, name, pl)
	if err != nil {
		return "", false
	}
	c, err := i.cache()
	if err != nil {
		return "", false
	}
	dir := c.path("trees", r.digest.key())
	if !treeReady(dir, pin.Program) {
		return "", false
	}
	return filepath.Join(dir, "bin", pin.Program), true
}

// copyTree copies a cached tree into dest inside the sandbox: pkg/ first,
// bin/<program> last, so a sandbox that has the link has everything.
func copyTree(ctx context.Context, t Target, tree, dest, program string, rep *reporter) error {
	entries, total, err := treeEntries(tree, program)
	if err != nil {
		return err
	}
	p := Progress{Phase: PhaseCopy, Total: total}
	rep.report(p, true)
	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		tw := &treeWriter{tw: tar.NewWriter(pw), tree: tree, bytes: &p.Bytes, on: func() { rep.report(p, false) }}
		pw.CloseWithError(tw.write(ctx, entries))
	}()
	err = t.CopyIn(ctx, dest, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	<-written
	if err != nil {
		return err
	}
	rep.report(p, true)
	return nil
}

// treeEntry is a file of a cached tree, by its slash path in the tree; a
// nil fi is a directory made for the archive.
type treeEntry struct {
	rel string
	fi  fs.FileInfo
}

// treeEntries lists a cached tree in copy order (pkg/, then bin/ and the
// program's link) with the bytes of its regular files.
func treeEntries(tree, program string) ([]treeEntry, int64, error) {
	var entries []treeEntry
	var total int64
	err := tarsafe.Walk(filepath.Join(tree, "pkg"), tree, func(_, rel string, fi fs.FileInfo) error {
		if fi.Mode().IsRegular() {
			total += fi.Size()
		}
		entries = append(entries, treeEntry{filepath.ToSlash(rel), fi})
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	fi, err := os.Lstat(filepath.Join(tree, "bin", program))
	if err != nil {
		return nil, 0, err
	}
	return append(entries, treeEntry{"bin", nil}, treeEntry{"bin/" + program, fi}), total, nil
}

// treeWriter writes a cached tree's entries as a tar, owned by root,
// counting the bytes of file content it copies in *bytes (on is called
// after each read).
type treeWriter struct {
	tw    *tar.Writer
	tree  string
	bytes *int64
	on    func()
}

func (w *treeWriter) write(ctx context.Context, entries []treeEntry) error {
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.entry(e); err != nil {
			return err
		}
	}
	return w.tw.Close()
}

func (w *treeWriter) entry(e treeEntry) error {
	if e.fi == nil {
		return w.tw.WriteHeader(&tar.Header{Name: e.rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX})
	}
	name := filepath.Join(w.tree, filepath.FromSlash(e.rel))
	target := ""
	if e.fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if target, err = os.Readlink(name); err != nil {
			return err
		}
	} else if !e.fi.Mode().IsRegular() && !e.fi.IsDir() {
		return nil
	}
	h, err := tar.FileInfoHeader(e.fi, target)
	if err != nil {
		return err
	}
	h.Name = e.rel
	if e.fi.IsDir() {
		h.Name += "/"
	}
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.Format = tar.FormatPAX
	if err := w.tw.WriteHeader(h); err != nil {
		return err
	}
	if !e.fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyN(w.tw, &countReader{r: f, n: w.bytes, on: w.on}, h.Size)
	if err != nil {
		return fmt.Errorf("%s (%d of %d bytes): %w", e.rel, n, h.Size, err)
	}
	return nil
}

// countReader counts what is read through it into *n.
type countReader struct {
	r  io.Reader
	n  *int64
	on func()
}

func (c *countReader) Read(b []byte) (int, error) {
	m, err := c.r.Read(b)
	*c.n += int64(m)
	if m > 0 {
		c.on()
	}
	return m, err
}
