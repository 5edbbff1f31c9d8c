package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sshconfig "github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/sandbox/driver"
)

// target is where the provider connects, after ssh config resolution.
type target struct {
	alias      string   // Host as given (without user and port)
	user       string   // login user
	addr       string   // host:port dialled
	identities []string // key files to offer, in order
	knownHosts string
}

func (o *Options) env(name string) string {
	for _, kv := range o.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func (o *Options) home() string {
	if h := o.env("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

func (o *Options) expand(p string) string {
	if p == "~" {
		return o.home()
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(o.home(), rest)
	}
	return p
}

// resolve reads Host ([user@]host[:port]) and the ssh config's entries for
// it (github.com/kevinburke/ssh_config: HostName, Port, User,
// IdentityFile); explicit options win.
func resolve(o *Options) (target, error) {
	t, port, err := parseHost(o.Host)
	if err != nil {
		return target{}, err
	}
	cfg, err := o.readConfig(t.alias)
	if err != nil {
		return target{}, err
	}
	t.user = firstOf(o.User, t.user, cfg.user, o.env("USER"), currentUser())
	if o.Port != 0 {
		port = strconv.Itoa(o.Port)
	}
	port = firstOf(port, cfg.port, strconv.Itoa(DefaultPort))
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return target{}, fmt.Errorf("ssh: port %q is not a port number", port)
	}
	t.addr = net.JoinHostPort(firstOf(cfg.hostname, t.alias), port)
	t.identities = o.identities(cfg.identities)
	t.knownHosts = o.expand(firstOf(o.KnownHosts, filepath.Join(o.home(), ".ssh", "known_hosts")))
	return t, nil
}

// parseHost splits [user@]host[:port].
func parseHost(host string) (t target, port string, err error) {
	h := host
	if u, rest, ok := strings.Cut(h, "@"); ok {
		t.user, h = u, rest
	}
	if hh, p, err := net.SplitHostPort(h); err == nil {
		h, port = hh, p
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if host == "" {
		return target{}, "", errors.New("ssh: no host (set host=user@host[:port])")
	}
	if h == "" || strings.ContainsAny(h, " \t\n\x00/@") {
		return target{}, "", fmt.Errorf("ssh: host %q is not [user@]host[:port]", host)
	}
	t.alias = h
	return t, port, nil
}

// hostConfig is what the ssh config file says of a host.
type hostConfig struct {
	hostname, port, user string
	identities           []string
}

// readConfig reads the ssh config file's entries for alias (none when
// Config is "none", or is unset and ~/.ssh/config does not exist).
func (o *Options) readConfig(alias string) (hostConfig, error) {
	var hc hostConfig
	cfgPath := o.Config
	if cfgPath == "" {
		cfgPath = filepath.Join(o.home(), ".ssh", "config")
		if _, err := os.Stat(cfgPath); err != nil {
			return hc, nil
		}
	}
	if cfgPath == "none" {
		return hc, nil
	}
	f, err := os.Open(o.expand(cfgPath))
	if err != nil {
		return hc, fmt.Errorf("ssh: config file: %w", err)
	}
	cfg, err := sshconfig.Decode(f)
	f.Close()
	if err != nil {
		return hc, fmt.Errorf("ssh: config file %s: %w", cfgPath, err)
	}
	if v, _ := cfg.Get(alias, "HostName"); v != "" {
		hc.hostname = strings.ReplaceAll(v, "%h", alias)
	}
	hc.port, _ = cfg.Get(alias, "Port")
	hc.user, _ = cfg.Get(alias, "User")
	ids, _ := cfg.GetAll(alias, "IdentityFile")
	for _, id := range ids {
		if id != "" {
			hc.identities = append(hc.identities, o.expand(id))
		}
	}
	return hc, nil
}

// identities are the key files to offer: Identity, else the config's,
// else the default files that exist.
func (o *Options) identities(fromConfig []string) []string {
	switch {
	case o.Identity != "":
		return []string{o.expand(o.Identity)}
	case len(fromConfig) > 0:
		return fromConfig
	}
	var ids []string
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(o.home(), ".ssh", n)
		if _, err := os.Stat(p); err == nil {
			ids = append(ids, p)
		}
	}
	return ids
}

// currentUser is the local user's name, or "".
func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// firstOf is the first of vs that is not empty.
func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// conn is one SSH connection with what the provider learned of the host.
type conn struct {
	client *ssh.Client
	done   chan struct{} // closed when the connection is gone
	once   sync.Once
	remote remote
	// cause is why the connection ended, for the errors of what it
	// carried: outpost's keepalive closed it, or the peer or the
	// network ended it.
	cause atomic.Pointer[string]
	// heard is the connection's socket, which tells when the server last
	// sent anything (keepAlive).
	heard *heardConn
}

// heardConn is a connection that records when it last read anything.
type heardConn struct {
	net.Conn
	last atomic.Int64 // unix nanoseconds
}

func (h *heardConn) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	if n > 0 {
		h.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// heardSince reports whether the server sent anything after t.
func (c *conn) heardSince(t time.Time) bool {
	return c.heard != nil && c.heard.last.Load() > t.UnixNano()
}

// closeFor closes the connection, remembering why (the first cause
// stays).
func (c *conn) closeFor(why string) {
	c.cause.CompareAndSwap(nil, &why)
	c.client.Close()
}

// lost is driver.ErrDisconnected with why the connection ended, when it
// is known.
func (c *conn) lost() error {
	if why := c.cause.Load(); why != nil {
		return fmt.Errorf("%w (%s)", driver.ErrDisconnected, *why)
	}
	return driver.ErrDisconnected
}

func (c *conn) dead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *conn) close() {
	c.closeFor("outpost closed it")
	<-c.done
}

// configErr is a configuration error of the provider.
func configErr(cause error, format string, a ...any) error {
	return &outpost.Error{Code: outpost.Configuration, Op: "lease", Msg: fmt.Sprintf(format, a...), Err: cause}
}

// authMethods are the agent's keys (agent=true) and the identity files'.
func (p *Provider) authMethods() ([]ssh.AuthMethod, func(), error) {
	var methods []ssh.AuthMethod
	var closers []io.Closer
	cleanup := func() {
		for _, c := range closers {
			c.Close()
		}
	}
	if p.opts.Agent {
		sock := p.opts.env("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, cleanup, configErr(ErrAuth, "agent=true, but SSH_AUTH_SOCK is not set (start ssh-agent and ssh-add your key)")
		}
		ac, err := net.Dial("unix", sock)
		if err != nil {
			return nil, cleanup, configErr(ErrAuth, "the ssh agent at SSH_AUTH_SOCK does not answer: %v", err)
		}
		closers = append(closers, ac)
		methods = append(methods, ssh.PublicKeysCallback(agent.NewClient(ac).Signers))
	}
	var signers []ssh.Signer
	for _, id := range p.tgt.identities {
		b, err := os.ReadFile(id)
		if err != nil {
			if p.opts.Identity != "" {
				return nil, cleanup, configErr(ErrAuth, "identity %s: %v", id, err)
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			var pp *ssh.PassphraseMissingError
			if errors.As(err, &pp) {
				if p.opts.Identity != "" {
					return nil, cleanup, configErr(ErrAuth, "identity %s has a passphrase: load it into an agent (ssh-add) and set agent=true", id)
				}
				continue
			}
			return nil, cleanup, configErr(ErrAuth, "identity %s: %v", id, err)
		}
		signers = append(signers, s)
	}
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeys(signers...))
	}
	if len(methods) == 0 {
		cleanup()
		return nil, func() {}, configErr(ErrAuth, "no key to offer %s: set identity=PATH or agent=true", p.Address())
	}
	return methods, cleanup, nil
}

// hostKeys returns the callback verifying the host's key against
// known_hosts, and the key algorithms known_hosts holds for the host (so
// the server is asked for a key that can be verified).
func (p *Provider) hostKeys() (ssh.HostKeyCallback, []string, error) {
	kh := p.tgt.knownHosts
	if _, err := os.Stat(kh); err != nil {
		return nil, nil, configErr(ErrHostKey, "known_hosts file %s: %v; outpost always verifies the host's key: add it with `ssh-keyscan -p %s %s >> %s` after checking its fingerprint", kh, errors.Unwrap(err), port(p.tgt.addr), hostOf(p.tgt.addr), kh)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		return nil, nil, configErr(ErrHostKey, "known_hosts file %s: %v", kh, err)
	}
	// Ask with a key nobody has: the error lists the known keys.
	var algos []string
	probe := &fakeKey{}
	if err := cb(knownhosts.Normalize(p.tgt.addr), fakeAddr(p.tgt.addr), probe); err != nil {
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			seen := map[string]bool{}
			for _, k := range ke.Want {
				for _, a := range algorithmsFor(k.Key.Type()) {
					if !seen[a] {
						seen[a] = true
						algos = append(algos, a)
					}
				}
			}
		}
	}
	check := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		if err == nil {
			return nil
		}
		fp := ssh.FingerprintSHA256(key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			return configErr(ErrHostKey, "the host key of %s (%s %s) is revoked in %s", p.tgt.addr, key.Type(), fp, kh)
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return configErr(ErrHostKey, "the host key of %s is not known: %s %s; check this fingerprint with the host's administrator, then accept it with `ssh-keyscan -p %s %s >> %s` (or connect once with ssh -o UserKnownHostsFile=%s)", p.tgt.addr, key.Type(), fp, port(p.tgt.addr), hostOf(p.tgt.addr), kh, kh)
		case errors.As(err, &ke):
			was := make([]string, 0, len(ke.Want))
			for _, w := range ke.Want {
				was = append(was, fmt.Sprintf("%s %s (%s:%d)", w.Key.Type(), ssh.FingerprintSHA256(w.Key), w.Filename, w.Line))
			}
			return configErr(ErrHostKey, "the host key of %s CHANGED: it is now %s %s, known_hosts has %s; this may be an attack. If the change is expected, remove the old key with `ssh-keygen -R %s -f %s` and accept the new one", p.tgt.addr, key.Type(), fp, strings.Join(was, ", "), knownhosts.Normalize(p.tgt.addr), kh)
		}
		return configErr(ErrHostKey, "verifying the host key of %s: %v", p.tgt.addr, err)
	}
	return check, algos, nil
}

// algorithmsFor are the host key algorithms that yield keys of type t.
func algorithmsFor(t string) []string {
	if t == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{t}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// fakeKey is a host key nobody has: checking it lists the known ones.
type fakeKey struct{}

func (*fakeKey) Type() string                        { return "outpost-probe" }
func (*fakeKey) Marshal() []byte                     { return []byte("outpost-probe") }
func (*fakeKey) Verify([]byte, *ssh.Signature) error { return errors.New("probe") }

func fakeAddr(string) net.Addr { return &net.TCPAddr{IP: net.IPv4zero} }

// errProviderClosed is the error of an Open after the provider's Close.
var errProviderClosed = errors.New("ssh: the provider is closed")

func (p *Provider) closedErr() error { return errProviderClosed }

// wait marks the connection dead once it has ended.
func (c *conn) wait() {
	err := c.client.Wait()
	why := "the server or the network ended it"
	if err != nil && !errors.Is(err, io.EOF) {
		why += ": " + err.Error()
	}
	c.cause.CompareAndSwap(nil, &why)
	c.markDead()
}

func (c *conn) markDead() { c.once.Do(func() { close(c.done) }) }

func (c *conn) keepAlive(interval time.Duration) { keepAlive(c, interval) }

func (c *conn) sendKeepAlive() error {
	_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
	return err
}

// newSession opens a session, telling a dropped connection apart.
func (c *conn) newSession() (*ssh.Session, error) {
	if c.dead() {
		return nil, fmt.Errorf("ssh: %w", c.lost())
	}
	s, err := c.client.NewSession()
	if err != nil {
		if c.dead() || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return nil, fmt.Errorf("ssh: %w: %v", c.lost(), err)
		}
		return nil, fmt.Errorf("ssh: opening a session: %w (the server's MaxSessions may be too low for this many concurrent processes)", err)
	}
	return s, nil
}

// keepAliveFailed is the cause of a connection whose keepalive could not
// be sent: its transport had already ended, the server's or the
// network's doing (the write usually loses the race with the reader
// that saw the end, and fails on a closed connection).
func keepAliveFailed(err error) string {
	return "the server or the network ended it (keepalive: " + err.Error() + ")"
}

// keepAlive sends keepalive requests every interval and closes the
// connection after keepAliveMisses intervals in a row in which the server
// sent nothing at all: no reply (to this keepalive or a late one to an
// earlier), no data, no window. A host that is slow to answer, under
// load, is alive as long as anything comes from it; a frozen one (or a
// network that drops everything) is not.
func keepAlive(c *conn, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	misses := 0
	pending := false // a keepalive sent and not yet answered
	replied := make(chan error, 1)
	last := time.Now()
	for {
		select {
		case <-c.done:
			return
		case err := <-replied:
			pending = false
			if err != nil {
				c.closeFor(keepAliveFailed(err))
				return
			}
			misses = 0
		case <-t.C:
			heard := c.heardSince(last)
			last = time.Now()
			switch {
			case heard:
				misses = 0
			case pending:
				if misses++; misses >= keepAliveMisses {
					c.closeFor(fmt.Sprintf("outpost closed it: nothing from the server for %d keepalive intervals of %s in a row, a keepalive unanswered", keepAliveMisses, interval))
					return
				}
			}
			if !pending {
				pending = true
				go func() { replied <- c.sendKeepAlive() }()
			}
		}
	}
}

// dial connects and authenticates, within StartTimeout and ctx.
func (p *Provider) dial(ctx context.Context) (*conn, error) {
	methods, cleanup, err := p.authMethods()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	hk, algos, err := p.hostKeys()
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{
		User:              p.tgt.user,
		Auth:              methods,
		HostKeyCallback:   hk,
		HostKeyAlgorithms: algos,
		Timeout:           p.opts.StartTimeout,
		ClientVersion:     "SSH-2.0-outpost",
	}
	dctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(dctx, "tcp", p.tgt.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("ssh: %w: %s: %w (within %s)", driver.ErrUnreachable, p.tgt.addr, err, p.opts.StartTimeout)
	}
	nc := &heardConn{Conn: raw}
	// The handshake and authentication are bounded too.
	stop := context.AfterFunc(dctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	_ = nc.SetDeadline(time.Now().Add(p.opts.StartTimeout))
	cc, chans, reqs, err := ssh.NewClientConn(nc, p.tgt.addr, cfg)
	stop()
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var oe *outpost.Error
		if errors.As(err, &oe) {
			return nil, oe // the host key check's
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, configErr(ErrAuth, "%s refused every key offered (%s): add the public key to ~%s/.ssh/authorized_keys on the host", p.Address(), p.offered(), p.tgt.user)
		}
		if dctx.Err() != nil {
			return nil, fmt.Errorf("ssh: %w: %s: no SSH handshake within %s: %w", driver.ErrUnreachable, p.tgt.addr, p.opts.StartTimeout, err)
		}
		return nil, fmt.Errorf("ssh: %w: %s: %w", driver.ErrUnreachable, p.tgt.addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c := &conn{client: ssh.NewClient(cc, chans, reqs), done: make(chan struct{}), heard: nc}
	go c.wait()
	if p.opts.KeepAlive > 0 {
		go c.keepAlive(p.opts.KeepAlive)
	}
	return c, nil
}

func (p *Provider) offered() string {
	var s []string
	if p.opts.Agent {
		s = append(s, "the agent's keys")
	}
	s = append(s, p.tgt.identities...)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// connect returns the provider's connection, dialling (and preparing the
// host) when there is none or the last one dropped.
func (p *Provider) connect(ctx context.Context) (*conn, error) {
	p.mu.Lock()
	c, closed := p.conn, p.closed
	p.mu.Unlock()
	if closed {
		return nil, p.closedErr()
	}
	if c != nil && !c.dead() {
		return c, nil
	}
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	p.mu.Lock()
	c = p.conn
	p.mu.Unlock()
	if c != nil && !c.dead() {
		return c, nil
	}
	c, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.prepare(ctx, c); err != nil {
		c.close()
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return nil, p.closedErr()
	}
	p.conn = c
	p.mu.Unlock()
	return c, nil
}
