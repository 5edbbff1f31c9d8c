package ssh_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/fakeapi"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// leaseDirs lists the lease directories on the server.
func leaseDirs(t *testing.T, srv *sshtest.Server) []string {
	t.Helper()
	out := srv.MustExec(t, "sh", "-c", "ls -A /home/agent/.outpost/leases 2>/dev/null || true")
	return strings.Fields(out)
}

// noneLeft checks that the server has the same lease directories as
// before (nothing left behind).
func noneLeft(t *testing.T, srv *sshtest.Server, before []string) {
	t.Helper()
	if got := leaseDirs(t, srv); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Errorf("lease directories on the host: %v, before: %v", got, before)
	}
}

func newKey(t *testing.T) (ssh.PublicKey, []byte) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	b, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := ssh.NewPublicKey(pub)
	return pk, pem.EncodeToMemory(b)
}

func acquireErr(t *testing.T, p driver.Provider, opts driver.Options) error {
	t.Helper()
	if opts.Workdir == "" {
		opts.Workdir = t.TempDir()
	}
	l, err := sandbox.Acquire(t.Context(), p, opts)
	if err == nil {
		l.Close(t.Context())
		t.Fatal("Acquire succeeded")
	}
	t.Logf("error: %v", err)
	return err
}

func TestHostKeyNotVerified(t *testing.T) {
	srv := sshtest.Shared(t)
	before := leaseDirs(t, srv)
	addr := net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))
	other, _ := newKey(t)
	cases := []struct {
		name, knownHosts string
		want             []string
	}{
		{"unknown", "", []string{"is not known", ssh.FingerprintSHA256(srv.HostKey), "ssh-keyscan"}},
		{"changed", knownhosts.Line([]string{knownhosts.Normalize(addr)}, other) + "\n", []string{"CHANGED", ssh.FingerprintSHA256(srv.HostKey), ssh.FingerprintSHA256(other), "ssh-keygen -R"}},
		{"other host", knownhosts.Line([]string{"elsewhere.example"}, srv.HostKey) + "\n", []string{"is not known"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kh := filepath.Join(t.TempDir(), "known_hosts")
			if err := os.WriteFile(kh, []byte(tc.knownHosts), 0o600); err != nil {
				t.Fatal(err)
			}
			p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.KnownHosts = kh })
			err := acquireErr(t, p, driver.Options{})
			if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, sshp.ErrHostKey) {
				t.Errorf("code %q, want configuration wrapping ErrHostKey: %v", outpost.CodeOf(err), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q", w)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.KnownHosts = filepath.Join(t.TempDir(), "nope") })
		err := acquireErr(t, p, driver.Options{})
		if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, sshp.ErrHostKey) {
			t.Errorf("code %q, want configuration wrapping ErrHostKey: %v", outpost.CodeOf(err), err)
		}
	})
	noneLeft(t, srv, before)
}

func TestKeyRefused(t *testing.T) {
	srv := sshtest.Shared(t)
	before := leaseDirs(t, srv)
	_, priv := newKey(t)
	id := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(id, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.Identity = id })
	err := acquireErr(t, p, driver.Options{})
	if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, sshp.ErrAuth) {
		t.Errorf("code %q, want configuration wrapping ErrAuth: %v", outpost.CodeOf(err), err)
	}
	if !strings.Contains(err.Error(), "authorized_keys") {
		t.Errorf("the error does not say how to fix it: %v", err)
	}
	// A missing identity file, and no agent.
	p = sshtest.Provider(t, srv, func(o *sshp.Options) { o.Identity = id + ".missing" })
	if err := acquireErr(t, p, driver.Options{}); outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, sshp.ErrAuth) {
		t.Errorf("missing identity: %v", err)
	}
	p = sshtest.Provider(t, srv, func(o *sshp.Options) { o.Agent = true; o.Environ = []string{"HOME=" + t.TempDir()} })
	if err := acquireErr(t, p, driver.Options{}); outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), "SSH_AUTH_SOCK") {
		t.Errorf("agent without SSH_AUTH_SOCK: %v", err)
	}
	noneLeft(t, srv, before)
}

// TestUnreachable: a closed port fails at once, and a port that accepts
// but never speaks SSH fails after the dial timeout; both with
// ErrUnreachable and code sandbox.
func TestUnreachable(t *testing.T) {
	srv := sshtest.Shared(t)
	closedAddr, err := fakeapi.RefusedAddr()
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for name, addr := range map[string]string{"closed": closedAddr, "silent": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.Host = "agent@" + addr; o.StartTimeout = time.Second })
			err := acquireErr(t, p, driver.Options{})
			if outpost.CodeOf(err) != outpost.Sandbox || !errors.Is(err, sshp.ErrUnreachable) {
				t.Errorf("code %q, want sandbox wrapping ErrUnreachable: %v", outpost.CodeOf(err), err)
			}
		})
	}
}

func TestNoTar(t *testing.T) {
	srv := sshtest.Shared(t)
	before := leaseDirs(t, srv)
	srv.MustExec(t, "mv", "/usr/bin/tar", "/usr/bin/tar.hidden")
	t.Cleanup(func() { srv.MustExec(t, "mv", "/usr/bin/tar.hidden", "/usr/bin/tar") })
	p := sshtest.Provider(t, srv)
	err := acquireErr(t, p, driver.Options{})
	if outpost.CodeOf(err) != outpost.Configuration || !errors.Is(err, sshp.ErrRemote) || !strings.Contains(err.Error(), "tar") {
		t.Errorf("code %q, want configuration wrapping ErrRemote naming tar: %v", outpost.CodeOf(err), err)
	}
	noneLeft(t, srv, before)
}

func TestWorkdirMissing(t *testing.T) {
	srv := sshtest.Shared(t)
	before := leaseDirs(t, srv)
	p := sshtest.Provider(t, srv)
	err := acquireErr(t, p, driver.Options{Workdir: filepath.Join(t.TempDir(), "nope")})
	if outpost.CodeOf(err) != outpost.Sandbox || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("local workdir: code %q, want sandbox wrapping fs.ErrNotExist: %v", outpost.CodeOf(err), err)
	}
	p = sshtest.Provider(t, srv, func(o *sshp.Options) { o.Workspace = sshp.Remote; o.Workdir = "/nonexistent/dir" })
	err = acquireErr(t, p, driver.Options{})
	if outpost.CodeOf(err) != outpost.Sandbox || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/nonexistent/dir") {
		t.Errorf("remote workdir: code %q, want sandbox wrapping fs.ErrNotExist: %v", outpost.CodeOf(err), err)
	}
	noneLeft(t, srv, before)
}

func TestBadOptions(t *testing.T) {
	for name, o := range map[string]*sshp.Options{
		"no host":       {},
		"bad host":      {Host: "user@ho st"},
		"bad port":      {Host: "h:99999"},
		"root":          {Host: "h", Root: "relative"},
		"remote no dir": {Host: "h", Workspace: sshp.Remote},
		"mode":          {Host: "h", Workspace: "bind"},
	} {
		t.Run(name, func(t *testing.T) {
			o.Config = "none"
			_, err := sshp.New(o)
			if outpost.CodeOf(err) != outpost.Configuration {
				t.Errorf("New: %v, want a configuration error", err)
			}
		})
	}
	if _, err := sshp.ParseSettings(map[string]string{"insecure": "true"}); err == nil || !strings.Contains(err.Error(), "known:") {
		t.Errorf("an unknown setting: %v", err)
	}
}
