package ssh

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/shim"
)

// remote is what the provider learned of the host when it connected.
type remote struct {
	root   string            // the provider's directory, absolute
	arch   string            // GOARCH of the host
	boot   string            // the host's boot id
	env    map[string]string // the allowlisted login environment
	binary string            // outpost's static binary on the host
	binDir string            // its directory (leads PATH)
	home   string            // the login user's home
	bwrap  string            // bubblewrap's path, when it isolates here (isolation.go)
	noIso  string            // why not, when the setting is not none
}

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// command joins argv into a shell command line.
func command(argv ...string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
}

// result is the outcome of a helper command.
type result struct {
	code           int
	stdout, stderr []byte
}

// run runs a shell command on c to completion, feeding it stdin (nil:
// none). A dropped connection gives driver.ErrDisconnected; ctx's end closes the
// session.
func run(ctx context.Context, c *conn, cmd string, stdin io.Reader) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	s, err := c.newSession()
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	out, errb := &shim.Limited{N: 4 << 20}, &shim.Limited{N: 1 << 20}
	s.Stdout, s.Stderr = out, errb
	if stdin != nil {
		s.Stdin = stdin
	}
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Run(cmd)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	res := result{stdout: out.Bytes(), stderr: errb.Bytes()}
	var ee *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitStatus()
		if ee.Signal() != "" {
			res.code = -1
		}
	case c.dead():
		return res, fmt.Errorf("ssh: %w: %v", c.lost(), err)
	default:
		var em *ssh.ExitMissingError
		if errors.As(err, &em) {
			c.checkAlive()
			if c.dead() {
				return res, fmt.Errorf("ssh: %w: %v", c.lost(), err)
			}
		}
		return res, fmt.Errorf("ssh: %w", err)
	}
	return res, nil
}

// checkAlive asks the server for a reply: a connection that cannot answer
// is closed, so that dead() tells.
func (c *conn) checkAlive() {
	if c.dead() {
		return
	}
	if err := c.sendKeepAlive(); err != nil {
		c.closeFor(keepAliveFailed(err))
		c.markDead()
	}
}

// probeScript prepares the root directory and prints key=value lines of
// what outpost needs to know of the host.
func probeScript(root string) string {
	r := shq(root)
	if rest, ok := strings.CutPrefix(root, "~/"); ok {
		r = `"$HOME"/` + shq(rest)
	}
	var b strings.Builder
	b.WriteString("umask 077\n")
	fmt.Fprintf(&b, "R=%s\n", r)
	b.WriteString(`mkdir -p "$R/bin" "$R/trees" "$R/leases" || exit 10
chmod 700 "$R" || exit 10
printf 'root=%s\n' "$(cd "$R" && pwd -P)"
printf 'arch=%s\n' "$(uname -m)"
printf 'os=%s\n' "$(uname -s)"
printf 'boot=%s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
printf 'tar=%s\n' "$(command -v tar)"
printf 'home=%s\n' "$HOME"
for d in "$R"/bin/*/outpost; do [ -x "$d" ] && printf 'bin=%s\n' "$d"; done
`)
	for _, v := range Allowlist {
		fmt.Fprintf(&b, "[ -n \"${%s+x}\" ] && printf 'env.%s=%%s\\n' \"$%s\"\n", v, v, v)
	}
	b.WriteString("exit 0\n")
	return b.String()
}

// prepare learns the host and makes sure outpost's static binary is
// there (copied once per host, by digest, verified on the host).
func (p *Provider) prepare(ctx context.Context, c *conn) error {
	res, err := run(ctx, c, probeScript(p.opts.Root), nil)
	if err != nil {
		return err
	}
	if res.code == 10 {
		return configErr(ErrRemote, "%s: cannot make the directory %s on the host: %s", p.Address(), p.opts.Root, strings.TrimSpace(string(res.stderr)))
	}
	if res.code != 0 {
		return configErr(ErrRemote, "%s: the host's shell failed (exit %d: %s); outpost needs a POSIX sh as the login shell's command runner", p.Address(), res.code, strings.TrimSpace(string(res.stderr)))
	}
	r := remote{env: map[string]string{}}
	var bins []string
	var osName string
	for _, line := range strings.Split(string(res.stdout), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch {
		case k == "root":
			r.root = v
		case k == "arch":
			r.arch = selfbin.Arch(v)
		case k == "os":
			osName = v
		case k == "boot":
			r.boot = v
		case k == "tar":
			if v == "" {
				return configErr(ErrRemote, "%s has no tar on the PATH of its login shell: outpost needs sh and tar on the remote host (Debian/Ubuntu: apt-get install tar)", p.Address())
			}
		case k == "bin":
			bins = append(bins, v)
		case k == "home":
			r.home = v
		case strings.HasPrefix(k, "env."):
			r.env[strings.TrimPrefix(k, "env.")] = v
		}
	}
	if osName != "Linux" || !path.IsAbs(r.root) {
		return configErr(ErrRemote, "%s runs %q: outpost's remote sandboxes need Linux", p.Address(), osName)
	}
	bin := p.opts.Binary
	if bin != "" {
		if err := selfbin.Check(bin, r.arch); err != nil {
			return configErr(err, "ssh: binary %s: it must be a static outpost binary for linux/%s: %s", bin, r.arch, selfbin.Hint)
		}
	} else if bin, err = selfbin.LocateOrBuild(ctx, r.arch); err != nil {
		return fmt.Errorf("ssh: outpost's static binary for linux/%s: %w", r.arch, err)
	}
	sum, err := fileSum(bin)
	if err != nil {
		return fmt.Errorf("ssh: outpost binary: %w", err)
	}
	r.binDir = path.Join(r.root, "bin", sum[:32])
	r.binary = path.Join(r.binDir, "outpost")
	have := false
	for _, b := range bins {
		have = have || b == r.binary
	}
	if !have {
		if err := upload(ctx, c, bin, r, sum); err != nil {
			return err
		}
	}
	if err := p.probeIsolation(ctx, c, &r); err != nil {
		return err
	}
	c.remote = r
	return nil
}

var sums sync.Map // local path + size + mtime -> hex SHA-512

// fileSum is the hex SHA-512 of a local file (remembered while it is
// unchanged).
func fileSum(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", p, fi.Size(), fi.ModTime().UnixNano())
	if v, ok := sums.Load(key); ok {
		return v.(string), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	s := hex.EncodeToString(h.Sum(nil))
	sums.Store(key, s)
	return s, nil
}

// upload copies the binary to the host, verifies its SHA-512 there (with
// the copy itself) and moves it into place.
func upload(ctx context.Context, c *conn, bin string, r remote, sum string) error {
	f, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("ssh: outpost binary: %w", err)
	}
	defer f.Close()
	script := fmt.Sprintf(`umask 022
set -e
d=%s
mkdir -p "$d"
t="$d/.outpost.$$"
trap 'rm -f "$t"' EXIT
cat >"$t"
chmod 555 "$t"
s=$("$t" %s sum "$t") || { echo "the copied binary does not run here" >&2; exit 11; }
[ "$s" = %s ] || { echo "the copied binary's SHA-512 is $s" >&2; exit 12; }
mv -f "$t" "$d/outpost"
`, shq(r.binDir), shim.Subcommand, shq(sum))
	res, err := run(ctx, c, script, f)
	if err != nil {
		return fmt.Errorf("ssh: copying outpost's binary to the host: %w", err)
	}
	if res.code != 0 {
		return fmt.Errorf("%w: copying outpost's binary to %s: exit %d: %s", ErrRemote, r.binDir, res.code, strings.TrimSpace(string(res.stderr)))
	}
	return nil
}
