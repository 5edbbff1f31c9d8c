package bootstrap

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// CacheVariable names the directory of outpost's host-side caches; the
// bootstrap cache is its "bootstrap" subdirectory. Default ~/.cache/outpost.
const CacheVariable = "OUTPOST_CACHE"

// ErrDigestMismatch is wrapped when a download's SHA-512 is not the
// pinned one. Nothing is installed; the error's details name both.
var ErrDigestMismatch = errors.New("bootstrap: digest mismatch")

// ErrTruncated is wrapped when a download ended before the length its
// server announced. Nothing is installed.
var ErrTruncated = errors.New("bootstrap: truncated download")

// ErrDownload is wrapped when an artifact could not be downloaded (the
// server's status, the network).
var ErrDownload = errors.New("bootstrap: download failed")

// MaxDownload bounds one artifact's size.
const MaxDownload = 4 << 30

// DefaultCacheDir is $OUTPOST_CACHE/bootstrap, or
// ~/.cache/outpost/bootstrap.
func DefaultCacheDir() (string, error) {
	if c := os.Getenv(CacheVariable); c != "" {
		return filepath.Join(c, "bootstrap"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set %s): %w", CacheVariable, err)
	}
	return filepath.Join(home, ".cache", "outpost", "bootstrap"), nil
}

// cache is the host-side store of verified downloads and their unpacked
// trees, everything keyed by digest (see docs/bootstrap.md):
//
//	blobs/sha512-<hex>              a verified download, never modified
//	blobs/sha512-<hex>.unverified   a download in progress
//	trees/sha512-<hex>/pkg/...      the artifact unpacked
//	trees/sha512-<hex>/bin/<name>   -> ../pkg/<bin>
//	locks/sha512-<hex>.lock         held while one process fetches or unpacks
//
// Entries appear by rename only, so a reader never sees a partial one, and
// one process at a time (the lock holder) creates an entry; the others
// wait for it and use its result.
type cache struct {
	dir      string
	client   *http.Client
	attempts int
	idle     time.Duration
	backoff  time.Duration
}

func (c *cache) path(kind, name string) string { return filepath.Join(c.dir, kind, name) }

func (c *cache) mkdirs() error {
	for _, d := range []string{"blobs", "trees", "locks"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// fetched describes where a tree came from.
type fetched struct {
	dir        string // the tree
	source     Source // SourceCache or SourceDownload
	downloaded int64  // bytes downloaded
}

// tree returns the unpacked tree of artifact a (whose digest is d),
// downloading and unpacking it first when the cache lacks it. program is
// the name of the tree's bin/ link to the executable.
func (c *cache) tree(ctx context.Context, a *Artifact, d Digest, strip int, program string, rep func(Progress, bool)) (fetched, error) {
	dir := c.path("trees", d.key())
	if treeReady(dir, program) {
		return fetched{dir: dir, source: SourceCache}, nil
	}
	if err := c.mkdirs(); err != nil {
		return fetched{}, err
	}
	unlock, err := lockFile(ctx, c.path("locks", d.key()+".lock"), func() {
		rep(Progress{Phase: PhaseWait, Artifact: a.Name()}, true)
	})
	if err != nil {
		return fetched{}, fmt.Errorf("locking the cache entry of %s: %w", a.Name(), err)
	}
	defer unlock()
	// Another process may have finished meanwhile.
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		if err := linkBin(dir, program, a.Bin); err != nil {
			return fetched{}, err
		}
		return fetched{dir: dir, source: SourceCache}, nil
	}
	// Unpacks in progress for this digest belong to the lock's holder:
	// any found now were left by a process that died.
	if stale, err := filepath.Glob(filepath.Join(c.dir, "trees", tmpPrefix(dir)+"*")); err == nil {
		for _, d := range stale {
			removeTree(d)
		}
	}
	f := fetched{dir: dir, source: SourceCache}
	blob := c.path("blobs", d.key())
	for try := 0; ; try++ {
		if _, err := os.Stat(blob); errors.Is(err, fs.ErrNotExist) {
			n, err := c.download(ctx, a, d, blob, rep)
			f.downloaded += n
			if err != nil {
				return f, err
			}
			f.source = SourceDownload
		} else if err != nil {
			return f, err
		}
		err := c.unpack(ctx, a, d, blob, dir, strip, program, rep)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, errCorrupt) || try > 0 {
			return f, err
		}
		// The cached download no longer matches its digest (disk damage,
		// tampering): drop it and download again, once.
		if rerr := os.Remove(blob); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return f, errors.Join(err, rerr)
		}
	}
}

// treeReady reports whether dir is a complete tree with program's link.
func treeReady(dir, program string) bool {
	fi, err := os.Stat(filepath.Join(dir, "bin", program))
	return err == nil && fi.Mode().IsRegular()
}

// errCorrupt marks a cached download that fails its digest when unpacked.
var errCorrupt = errors.New("cached download does not match its digest")

// download fetches a into blob, verifying its SHA-512 while the bytes
// arrive: into blob.unverified, renamed to blob only when the digest
// matched. It retries transport failures, server errors and truncated
// bodies; a digest mismatch is final. It returns the bytes downloaded.
func (c *cache) download(ctx context.Context, a *Artifact, want Digest, blob string, rep func(Progress, bool)) (int64, error) {
	tmp := blob + ".unverified"
	var total int64
	var last error
	for attempt := 1; attempt <= c.attempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(c.backoff * time.Duration(1<<(attempt-2)))
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
		}
		n, err := c.get(ctx, a, a.URL, want, tmp, rep)
		total += n
		if err == nil {
			if err := os.Rename(tmp, blob); err != nil {
				os.Remove(tmp)
				return total, err
			}
			syncDir(filepath.Dir(blob))
			return total, nil
		}
		os.Remove(tmp)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		last = err
		if !retryable(err) {
			break
		}
	}
	return total, last
}

// statusError is a server's refusal.
type statusError struct {
	url  string
	code int
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: %s", e.url, http.StatusText(e.code)+fmt.Sprintf(" (HTTP %d)", e.code))
}

func retryable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code >= 500 || se.code == http.StatusTooManyRequests || se.code == http.StatusRequestTimeout
	}
	return !errors.Is(err, ErrDigestMismatch) && !errors.Is(err, errTooLarge) && !errors.Is(err, errLocal)
}

var (
	errTooLarge = errors.New("larger than the download limit")
	errLocal    = errors.New("writing the download")
)

// get downloads url once into tmp, hashing as it goes.
func (c *cache) get(parent context.Context, a *Artifact, url string, want Digest, tmp string, rep func(Progress, bool)) (int64, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	resp, err := c.request(ctx, a, url)
	if err != nil {
		if parent.Err() != nil {
			return 0, parent.Err()
		}
		return 0, err
	}
	defer resp.Body.Close()
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errLocal, err)
	}
	defer f.Close()
	h := sha512.New()
	p := Progress{Phase: PhaseDownload, Artifact: a.Name(), Total: max(resp.ContentLength, 0)}
	rep(p, true)
	n, readErr, err := c.copyBody(ctx, cancel, resp.Body, io.MultiWriter(h, f), a, func(n int64) {
		p.Bytes = n
		rep(p, false)
	})
	if err != nil {
		return n, err
	}
	if parent.Err() == nil && readErr != nil && ctx.Err() != nil {
		readErr = context.Cause(ctx) // the idle watchdog
	}
	rep(p, true)
	var got Digest
	h.Sum(got[:0])
	if readErr != nil || (resp.ContentLength >= 0 && n < resp.ContentLength) {
		if parent.Err() != nil {
			return n, parent.Err()
		}
		return n, truncatedError(a, want, got, url, n, resp.ContentLength, readErr)
	}
	if got != want {
		return n, digestError(a, want, got, url)
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("%w: %w", errLocal, err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("%w: %w", errLocal, err)
	}
	rep(Progress{Phase: PhaseVerified, Artifact: a.Name(), Bytes: n}, true)
	return n, nil
}

// request asks for url and returns a response worth reading: status 200,
// no longer than MaxDownload says.
func (c *cache) request(ctx context.Context, a *Artifact, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDownload, err)
	}
	req.Header.Set("User-Agent", "outpost-bootstrap")
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDownload, a.Name(), err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrDownload, a.Name(), &statusError{url: url, code: resp.StatusCode})
	}
	if resp.ContentLength > MaxDownload {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s: %d bytes: %w", ErrDownload, a.Name(), resp.ContentLength, errTooLarge)
	}
	return resp, nil
}

// copyBody copies body to w, at most MaxDownload bytes, calling progress
// with the count after each read. A stalled body (no byte for c.idle)
// cancels ctx with its cause. readErr is the body's read error (the
// download is then truncated); err a local write error or a body too
// large.
func (c *cache) copyBody(ctx context.Context, cancel context.CancelCauseFunc, body io.Reader, w io.Writer, a *Artifact, progress func(int64)) (n int64, readErr, err error) {
	idle := time.AfterFunc(c.idle, func() { cancel(fmt.Errorf("no data for %s", c.idle)) })
	defer idle.Stop()
	buf := make([]byte, 256<<10)
	for {
		m, err := body.Read(buf)
		if m > 0 {
			idle.Reset(c.idle)
			if n+int64(m) > MaxDownload {
				return n, nil, fmt.Errorf("%w: %s: %w", ErrDownload, a.Name(), errTooLarge)
			}
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, nil, fmt.Errorf("%w: %w", errLocal, werr)
			}
			n += int64(m)
			progress(n)
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// truncatedError is the error of a download that ended after n of length
// bytes (length -1: unknown) because of cause (nil: the body just ended).
func truncatedError(a *Artifact, want, got Digest, url string, n, length int64, cause error) error {
	e := digestError(a, want, got, url)
	e.Op = "download"
	e.Detail("truncated", true).Detail("bytes", n)
	of := ""
	if length >= 0 {
		e.Detail("expected_bytes", length)
		of = fmt.Sprintf(" of %d", length)
	}
	if cause == nil {
		cause = io.ErrUnexpectedEOF
	}
	e.Err = fmt.Errorf("%w: %s: the download ended after %d%s bytes (%w); nothing was installed", ErrTruncated, a.Name(), n, of, cause)
	return e
}

// digestError is the coded error of a download whose SHA-512 is not the
// pinned one: code bootstrap, details expected and actual (in the pin's
// notation: SRI for npm, hex for archives), url and artifact.
func digestError(a *Artifact, want, got Digest, url string) *outpost.Error {
	show := Digest.SRI
	if a.SHA512 != "" {
		show = Digest.Hex
	}
	e := &outpost.Error{Code: outpost.Bootstrap, Op: "verify",
		Err: fmt.Errorf("%w: %s from %s: expected %s, got %s; nothing was installed", ErrDigestMismatch, a.Name(), url, show(want), show(got))}
	e.Detail("expected", show(want)).Detail("actual", show(got)).Detail("url", url).Detail("artifact", a.Name())
	return e
}

// unpack extracts blob into dir (through a temporary sibling renamed into
// place), checking blob's digest again on the way (errCorrupt) and the
// tree's safety: no entry outside it, no link resolving outside it, no
// device, no setuid bit. The executable must be in it.
func (c *cache) unpack(ctx context.Context, a *Artifact, want Digest, blob, dir string, strip int, program string, rep func(Progress, bool)) (err error) {
	rep(Progress{Phase: PhaseExtract, Artifact: a.Name()}, true)
	tmp := filepath.Join(filepath.Dir(dir), tmpPrefix(dir)+randHex(6))
	if err := os.MkdirAll(filepath.Join(tmp, "pkg"), 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			removeTree(tmp)
		}
	}()
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha512.New()
	src := bufio.NewReaderSize(io.TeeReader(f, h), 1<<20)
	if err := extract(ctx, src, filepath.Join(tmp, "pkg"), strip); err != nil {
		if sumMismatch(f, h, want) {
			return errCorrupt
		}
		return fmt.Errorf("unpacking %s: %w", a.Name(), err)
	}
	if sumMismatch(src, h, want) {
		return errCorrupt
	}
	if err := tarsafe.CheckTree(filepath.Join(tmp, "pkg")); err != nil {
		return fmt.Errorf("unpacking %s: %w", a.Name(), err)
	}
	if err := normalizeModes(filepath.Join(tmp, "pkg")); err != nil {
		return err
	}
	if err := linkBin(tmp, program, a.Bin); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	syncDir(filepath.Dir(dir))
	return nil
}

// tmpPrefix names the temporary directories in which tree dir is
// unpacked.
func tmpPrefix(dir string) string { return ".tmp-" + filepath.Base(dir) + "-" }

// sumMismatch reads the rest of r (into h through the tee) and reports
// whether the whole file's digest differs from want.
func sumMismatch(r io.Reader, h hash.Hash, want Digest) bool {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return true
	}
	var got Digest
	h.Sum(got[:0])
	return got != want
}

// extract unpacks a tar stream, gzip-compressed or not, into dir, removing
// strip leading components of each name (entries left with no name are
// skipped).
func extract(ctx context.Context, r *bufio.Reader, dir string, strip int) error {
	var in io.Reader = r
	if magic, err := r.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		in = zr
	}
	pr := tarsafe.Rewrite(in, func(h *tar.Header) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		// Judge the name as the archive wrote it: stripping "/tmp/x" must
		// not turn an absolute name into a harmless one.
		if _, err := tarsafe.CleanName(h.Name); err != nil {
			return false, err
		}
		name, ok := stripName(h.Name, strip)
		if !ok {
			return false, nil
		}
		h.Name = name
		if h.Typeflag == tar.TypeLink {
			if h.Linkname, ok = stripName(h.Linkname, strip); !ok {
				return false, fmt.Errorf("%w: hard link %q points outside the package", tarsafe.ErrUnsafe, h.Name)
			}
		}
		return true, nil
	})
	defer pr.Close()
	return tarsafe.Extract(pr, dir)
}

// stripName removes n leading components of a tar entry name.
func stripName(name string, n int) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	for range n {
		_, rest, ok := strings.Cut(name, "/")
		if !ok {
			return "", false
		}
		name = rest
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" || name == "." {
		return "", false
	}
	return name, true
}

// linkBin makes tree/bin/program a link to ../pkg/bin, checking that bin
// is a regular file in the package (made executable: archives do not
// always say).
func linkBin(tree, program, bin string) error {
	target := filepath.Join(tree, "pkg", filepath.FromSlash(bin))
	root, err := os.OpenRoot(filepath.Join(tree, "pkg"))
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Stat(filepath.FromSlash(bin))
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the package has no executable %s (the pin's bin)", bin)
	}
	if fi.Mode().Perm() != 0o555 {
		if err := os.Chmod(target, 0o555); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		return err
	}
	link := filepath.Join(tree, "bin", program)
	rel := path.Join("..", "pkg", bin)
	if cur, err := os.Readlink(link); err == nil && cur == rel {
		return nil
	}
	tmp := link + ".tmp-" + randHex(4)
	if err := os.Symlink(rel, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// normalizeModes gives the unpacked package fixed modes: directories
// 0755, files 0555 when the archive made them executable for anyone and
// 0444 otherwise. Nothing is writable (the local provider runs the CLI
// from the cache itself), and everything is readable by a sandbox's user,
// which is not the cache's owner when a provider mounts the cache
// (archives often leave directories implicit, which extraction creates
// 0700).
func normalizeModes(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Chmod(p, 0o755)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o444)
			if fi.Mode().Perm()&0o111 != 0 {
				mode = 0o555
			}
			return os.Chmod(p, mode)
		}
		return nil
	})
}

// removeTree removes dir, even where an unpacked archive made
// directories unwritable.
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
