package ssh

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/workspace"
	"github.com/outposthq/outpost/sandbox/driver"
)

// A remote host cannot mount the caller's directories. What it can do is
// keep its own copy of content-addressed ones: the bootstrap cache's
// unpacked CLIs live in directories named by their artifact's digest
// (sha512-<hex>), which never change. The provider honours a mount
// (driver.Options.Mounts) by mirroring, on first use, each such
// directory under <root>/trees on the host, verifying the copy's SHA-512
// (shim.TreeSum) on the host before moving it into place. Every later
// lease on the host, from any process, finds it there: only the first
// pays for the copy.

// treeName matches the names of content-addressed directories.
var treeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha512-[0-9a-f]{128}$`) })

// mirrorTimeout bounds one mirror (HostPath has no context).
const mirrorTimeout = 10 * time.Minute

// sharedMounts keeps the requested mounts whose source is an existing
// absolute directory.
func sharedMounts(req []driver.Mount) []driver.Mount {
	var out []driver.Mount
	for _, m := range req {
		if !filepath.IsAbs(m.Source) {
			continue
		}
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, driver.Mount{Source: filepath.Clean(m.Source), Target: m.Target})
	}
	return out
}

// HostPath returns where the host path p is on the remote host: a
// mount's source maps to <root>/trees, and a path inside one of its
// content-addressed directories to that directory's mirror, which is made
// (and verified) first when the host lacks it. Other paths are not
// visible (false): the caller copies them instead. It implements
// driver.HostPather.
func (s *Sandbox) HostPath(p string) (string, bool) {
	p = filepath.Clean(p)
	treesDir := path.Join(s.c.remote.root, "trees")
	for _, m := range s.shared {
		if p == m.Source {
			return treesDir, true
		}
		rest, ok := strings.CutPrefix(p, m.Source+string(filepath.Separator))
		if !ok {
			continue
		}
		name, below, _ := strings.Cut(filepath.ToSlash(rest), "/")
		if !treeName().MatchString(name) {
			return "", false
		}
		ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
		defer cancel()
		if err := s.p.mirror(ctx, s.c, filepath.Join(m.Source, name), name); err != nil {
			s.mirrorMu.Lock()
			s.mirrorErr = err
			s.mirrorMu.Unlock()
			return "", false
		}
		return path.Join(treesDir, name, below), true
	}
	return "", false
}

// HostPathError is why the last HostPath could not show a directory (a
// mirror that failed). It implements driver.HostPathExplainer.
func (s *Sandbox) HostPathError() error {
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	return s.mirrorErr
}

// mirror makes sure <root>/trees/<name> on the host is a verified copy of
// the local directory src.
func (p *Provider) mirror(ctx context.Context, c *conn, src, name string) error {
	p.treeMu.Lock()
	mu := p.trees[name]
	if mu == nil {
		mu = &sync.Mutex{}
		p.trees[name] = mu
	}
	p.treeMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	dst := path.Join(c.remote.root, "trees", name)
	res, err := run(ctx, c, "test -f "+shq(dst+".sum"), nil)
	if err != nil {
		return err
	}
	if res.code == 0 {
		return nil
	}
	sum, err := shim.TreeSum(src)
	if err != nil {
		return fmt.Errorf("ssh: %s: %w", src, err)
	}
	script := fmt.Sprintf(`umask 022
set -e
D=%s
T="$D.tmp-$$"
trap '[ ! -e "$T" ] || { chmod -R u+w "$T"; rm -rf "$T"; } 2>/dev/null || :' EXIT
mkdir -p "$T"
tar -x -p --no-same-owner -C "$T" -f -
s=$(%s)
[ "$s" = %s ] || { echo "the copy's SHA-512 is $s" >&2; exit 13; }
if [ ! -d "$D" ]; then mv "$T" "$D" || [ -d "$D" ]; fi
printf '%%s\n' "$s" >"$D.sum.tmp-$$" && mv "$D.sum.tmp-$$" "$D.sum"
`, shq(dst), command(shim.SumArgs(c.remote.binary, "$T")...), shq(sum))
	script = strings.Replace(script, shq("$T"), `"$T"`, 1)
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := workspace.Write(ctx, tw, src, "", "", 0, 0, workspace.NewManifest())
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	res, err = run(ctx, c, script, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return fmt.Errorf("ssh: copying %s to the host: %w", name, err)
	}
	if res.code != 0 {
		return fmt.Errorf("%w: copying %s to %s: exit %d: %s", ErrRemote, src, dst, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}
