package ssh_test

import (
	"context"
	"testing"

	"github.com/outposthq/outpost/internal/isolate"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// execTunnels lists the exec tunnels running on srv's host.
func execTunnels(t *testing.T, srv *sshtest.Server) string {
	t.Helper()
	return survivors(t, srv, "sandbox-shim tunnel")
}

// openTunnel opens a lease of p and a tunnel of it, both ended when the
// test ends.
func openTunnel(t *testing.T, p *sshp.Provider) string {
	t.Helper()
	sb, err := p.Open(t.Context(), driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	addr, ln, err := sb.(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatalf("Tunnel: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return addr
}

// TestTunnel runs the suite's tunnel tests on the real sshd, which allows
// remote port forwarding: the tunnel is a forward of the lease's
// connection, no process on the host.
func TestTunnel(t *testing.T) {
	srv := sshtest.Shared(t)
	newProvider := func(t *testing.T) driver.Provider { return sshtest.Provider(t, srv, isolation(isolate.None)) }
	sandboxtest.RunTunnelTests(t, sandboxtest.Harness{NewProvider: newProvider})
	p := sshtest.Provider(t, srv, isolation(isolate.None))
	if p.Capabilities().Egress {
		t.Error("Capabilities.Egress is true: a remote host's network is not enforced without namespaces")
	}
	openTunnel(t, p)
	if ps := execTunnels(t, srv); ps != "" {
		t.Errorf("a forwarding server got an exec tunnel:\n%s", ps)
	}
}

// TestTunnelExecFallback: a server that refuses port forwarding to the
// key (authorized_keys' restrict) gets the exec tunnel, which passes the
// same tests.
func TestTunnelExecFallback(t *testing.T) {
	srv := sshtest.New(t)
	srv.MustExec(t, "sed", "-i", "s/^/restrict /", "/etc/outpost/authorized_keys")
	newProvider := func(t *testing.T) driver.Provider { return sshtest.Provider(t, srv) }
	sandboxtest.RunTunnelTests(t, sandboxtest.Harness{NewProvider: newProvider})
	openTunnel(t, sshtest.Provider(t, srv))
	if ps := execTunnels(t, srv); ps == "" {
		t.Error("no exec tunnel runs on the host of a server that refuses forwarding")
	}
}
