package ssh_test

import (
	"crypto/ed25519"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestConfigAlias: a Host alias of the ssh config file gives HostName,
// Port, User and IdentityFile.
func TestConfigAlias(t *testing.T) {
	srv := sshtest.Shared(t)
	cfg := filepath.Join(t.TempDir(), "config")
	body := "Host other\n  HostName 192.0.2.99\n\nHost build-*\n  HostName " + srv.Host + "\n  Port " + strconv.Itoa(srv.Port) +
		"\n  User " + sshtest.User + "\n  IdentityFile " + srv.Identity + "\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := sshtest.Provider(t, srv, func(o *sshp.Options) { o.Host, o.Config, o.Identity = "build-box", cfg, "" })
	if got, want := p.Address(), srv.Addr(); got != want {
		t.Errorf("Address() = %q, want %q", got, want)
	}
	lease(t, p, driver.Options{})
}

// TestAgent authenticates with the key of an ssh agent at SSH_AUTH_SOCK
// (an in-process keyring serving the agent protocol).
func TestAgent(t *testing.T) {
	srv := sshtest.Shared(t)
	b, err := os.ReadFile(srv.Identity)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: *raw.(*ed25519.PrivateKey)}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); agent.ServeAgent(keyring, c) }()
		}
	}()
	p := sshtest.Provider(t, srv, func(o *sshp.Options) {
		o.Identity, o.Agent = "", true
		o.Environ = []string{"HOME=" + t.TempDir(), "SSH_AUTH_SOCK=" + sock}
	})
	lease(t, p, driver.Options{})
}
