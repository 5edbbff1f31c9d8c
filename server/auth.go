package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outposthq/outpost/harness/kit/lazyre"
	"github.com/outposthq/outpost/internal/conncap"
)

// TokenPrefix starts every token AddToken makes, so a leaked one is easy
// to recognise (and to scan for).
const TokenPrefix = "opt_"

// ErrTokens marks a tokens file that cannot be used.
var ErrTokens = errors.New("server: tokens")

var tokenName = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

type tokenEntry struct {
	name     string
	sum      [sha256.Size]byte
	operator bool
	policy   Policy // the line's own fields; nil ones: Options.Policy's
}

// Tokens is a tokens file: one line per token, "NAME sha256:HEX", the
// SHA-256 of the token (tokens are 256 random bits, so a fast hash is
// enough), then optional fields (docs/serve.md, Policy and tenancy):
// "operator" (the token sees every client's turns and conversations and
// is not bound by the client policy), and "secrets=", "egress=",
// "egress-allow=" and "env=" with comma-separated values, which replace
// the server's Options.Policy field for this token. The file is read again when it changes, so adding or removing
// a line takes effect without a restart. Safe for concurrent use.
type Tokens struct {
	path string

	mu      sync.Mutex
	mod     time.Time
	size    int64
	entries []tokenEntry
}

// LoadTokens reads a tokens file. A missing file is an error: a TCP
// listener without tokens would be open to anyone.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// reload reads the file again when it changed. A file (or directory)
// that another user could write is refused, at start and on every reload:
// the last good list stays in force.
func (t *Tokens) reload() error {
	if err := CheckPrivate(filepath.Dir(t.path), 0o022, true); err != nil {
		return fmt.Errorf("%w: %w", ErrTokens, err)
	}
	if err := CheckPrivate(t.path, 0o022, false); err != nil {
		return fmt.Errorf("%w: %w", ErrTokens, err)
	}
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTokens, err)
	}
	t.mu.Lock()
	same := fi.ModTime().Equal(t.mod) && fi.Size() == t.size && t.entries != nil
	t.mu.Unlock()
	if same {
		return nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTokens, err)
	}
	entries, err := parseTokens(b)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrTokens, t.path, err)
	}
	t.mu.Lock()
	t.entries, t.mod, t.size = entries, fi.ModTime(), fi.Size()
	t.mu.Unlock()
	return nil
}

func parseTokens(b []byte) ([]tokenEntry, error) {
	entries := []tokenEntry{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || !tokenName.MatchString(fields[0]) || !strings.HasPrefix(fields[1], "sha256:") {
			return nil, fmt.Errorf("line %d: want NAME sha256:HEX [operator] [secrets=...] [egress=...] [egress-allow=...] [env=...]", n)
		}
		raw, err := hex.DecodeString(strings.TrimPrefix(fields[1], "sha256:"))
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("line %d: bad hash", n)
		}
		var e tokenEntry
		e.name = fields[0]
		copy(e.sum[:], raw)
		if err := e.fields(fields[2:]); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		entries = append(entries, e)
	}
	return entries, sc.Err()
}

// fields reads a token line's optional fields.
func (e *tokenEntry) fields(fields []string) error {
	for _, f := range fields {
		if f == "operator" {
			e.operator = true
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		var list []string
		if v != "" {
			list = strings.Split(v, ",")
		} else {
			list = []string{}
		}
		switch {
		case !ok:
			return fmt.Errorf("unknown field %q (known: operator, secrets=, egress=, egress-allow=, env=)", f)
		case k == "secrets":
			e.policy.Secrets = list
		case k == "egress":
			e.policy.Egress = list
		case k == "egress-allow":
			e.policy.EgressAllow = list
		case k == "env":
			e.policy.Env = list
		default:
			return fmt.Errorf("unknown field %q (known: operator, secrets=, egress=, egress-allow=, env=)", k)
		}
	}
	return e.policy.check()
}

// Check returns the name of the token, or false. Every stored hash is
// compared, in constant time, whatever matches.
func (t *Tokens) Check(token string) (string, bool) {
	e, ok := t.lookup(token)
	return e.name, ok
}

// lookup returns the token's entry, or false (see Check).
func (t *Tokens) lookup(token string) (tokenEntry, bool) {
	_ = t.reload() // a broken edit keeps the last good list
	sum := sha256.Sum256([]byte(token))
	t.mu.Lock()
	defer t.mu.Unlock()
	var match tokenEntry
	found := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			match, found = e, 1
		}
	}
	return match, found == 1 && token != ""
}

// AddToken makes a new token named name, appends its hash to the tokens
// file at path (created 0600 with its directory 0700), and returns the
// token: the only time it is seen. A name already in the file is refused.
// fields are the line's optional fields ("operator", "secrets=gateway,env",
// ...; see Tokens).
func AddToken(path, name string, fields ...string) (string, error) {
	if !tokenName.MatchString(name) {
		return "", fmt.Errorf("%w: token name %q: use letters, digits, '.', '_' and '-' (up to 64)", ErrTokens, name)
	}
	var probe tokenEntry
	for _, f := range fields {
		if strings.ContainsAny(f, " \t\n") {
			return "", fmt.Errorf("%w: field %q has white space", ErrTokens, f)
		}
	}
	if err := probe.fields(fields); err != nil {
		return "", fmt.Errorf("%w: %w", ErrTokens, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("%w: %w", ErrTokens, err)
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %w", ErrTokens, err)
	}
	entries, err := parseTokens(old)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrTokens, path, err)
	}
	for _, e := range entries {
		if e.name == name {
			return "", fmt.Errorf("%w: a token named %q exists", ErrTokens, name)
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	line := strings.Join(append([]string{name, "sha256:" + hex.EncodeToString(sum[:])}, fields...), " ")
	data := append(old, line+"\n"...)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokens-*")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTokens, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(data); err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrTokens, err)
		}
	} else {
		tmp.Close()
		return "", fmt.Errorf("%w: %w", ErrTokens, err)
	}
	return token, nil
}

// CheckPrivate refuses path unless it belongs to the server's user, is a
// directory (dir) or a regular file (not a symbolic link), and has none of
// the permission bits in deny: 0o077 for the socket's directory (only its
// owner may enter), 0o022 for the tokens file and its directory (no one
// else may write them).
func CheckPrivate(path string, deny fs.FileMode, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	what := "a regular file"
	if dir {
		what = "a directory"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s must be %s of this user's", path, what)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s must belong to this user (uid %d)", path, os.Geteuid())
	case fi.Mode().Perm()&deny != 0:
		return fmt.Errorf("%s has mode %04o: it must have none of %04o (chmod go-rwx)", path, fi.Mode().Perm(), deny)
	}
	return nil
}

// connInfo is what the server knows of a connection's peer.
type connInfo struct {
	unix  bool
	uid   int
	uidOK bool // the peer's credentials were read
}

type connKey struct{}

// connContext records the peer of a Unix connection (SO_PEERCRED).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*conncap.Conn); ok {
		ctx = context.WithValue(ctx, guardKey{}, cc)
		c = cc.Conn
	}
	ci := connInfo{}
	if uc, ok := c.(*net.UnixConn); ok {
		ci.unix = true
		ci.uid, ci.uidOK = peerUID(uc)
	}
	return context.WithValue(ctx, connKey{}, ci)
}

func connOf(ctx context.Context) connInfo {
	ci, _ := ctx.Value(connKey{}).(connInfo)
	return ci
}
