package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestTunnelNetworkNone runs the suite's tunnel tests on sandboxes opened
// with EgressGateway: the tunnel needs no network.
func TestTunnelNetworkNone(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	sandboxtest.RunTunnelTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider { return dockertest.Provider(t, dockertest.Busybox) },
		Options: func(t *testing.T) driver.Options {
			return driver.Options{Workdir: workdir(t), Egress: driver.EgressGateway}
		},
	})
}

// bridgeServer serves "reached" over HTTP on the docker bridge's gateway
// address (the host as containers on the bridge see it) and counts the
// requests.
func bridgeServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	return serveCounting(t, net.JoinHostPort(dockertest.BridgeGateway(t), "0"), "reached")
}

// serveCounting serves body over HTTP on a new listener at addr.
func serveCounting(t *testing.T, addr, body string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	return serveOn(t, ln, body, n), n
}

// serveOn serves body over HTTP on ln until the test ends, counting
// requests in count; it returns ln's address.
func serveOn(t *testing.T, ln net.Listener, body string, count ...*atomic.Int64) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range count {
			c.Add(1)
		}
		io.WriteString(w, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// fetch sends an HTTP/1.0 GET to addr from inside l, with the in-sandbox
// binary's dial mode (the busybox image's static wget cannot), and
// returns the response's body, or the dial's error, and whether it got a
// 200.
func fetch(t *testing.T, l *sandbox.Lease, addr string) (string, bool) {
	t.Helper()
	res := shStatus(t, l, fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | outpost sandbox-shim dial %s 2>&1`, addr))
	out := string(res.Stdout)
	head, body, found := strings.Cut(out, "\r\n\r\n")
	if !res.Status.Success() || !found || !strings.HasPrefix(head, "HTTP/1.0 200 ") {
		return strings.TrimSpace(out), false
	}
	return body, true
}

// TestEgressGateway: a sandbox opened with EgressGateway has no network
// but its loopback (network none, no route, no interface but lo): it
// cannot reach an HTTP server on the host's bridge address, which an open
// sandbox reaches, and through its tunnel it reaches a handler on the
// host.
func TestEgressGateway(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	if !p.Capabilities().Egress {
		t.Error("Capabilities.Egress is false")
	}
	addr, _ := bridgeServer(t)

	open := lease(t, p, driver.Options{})
	if got, ok := fetch(t, open, addr); !ok || got != "reached" {
		t.Fatalf("an open sandbox does not reach %s (%q): the test proves nothing here", addr, got)
	}

	gw := lease(t, p, driver.Options{Egress: driver.EgressGateway})
	ins, err := gw.Sandbox().(*docker.Sandbox).Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ins.HostConfig.NetworkMode != "none" || len(ins.HostConfig.ExtraHosts) != 0 {
		t.Errorf("network %q, extra hosts %v; want none and none", ins.HostConfig.NetworkMode, ins.HostConfig.ExtraHosts)
	}
	if got, ok := fetch(t, gw, addr); ok || strings.Contains(got, "reached") {
		t.Errorf("a gateway sandbox reached %s: %q", addr, got)
	}
	if got := sh(t, gw, "ls /sys/class/net"); got != "lo" {
		t.Errorf("network interfaces: %q, want lo only", got)
	}
	// /proc/net/route: its header line, no route at all.
	if got := sh(t, gw, "tail -n +2 /proc/net/route | wc -l"); got != "0" {
		t.Errorf("routes: %s, want none", got)
	}

	taddr, ln, err := gw.Sandbox().(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	serveOn(t, ln, "through the tunnel", &seen)
	if got, ok := fetch(t, gw, taddr); !ok || got != "through the tunnel" {
		t.Errorf("through the tunnel at %s: %q, %v", taddr, got, ok)
	}
	if seen.Load() != 1 {
		t.Errorf("the host handler saw %d requests, want 1", seen.Load())
	}
}

// TestTunnelUnreachableFromOtherContainers: a second container on the
// same Docker host cannot reach another lease's tunnel: the tunnel's
// address is the first container's own loopback, which is not the
// second's, and nothing listens for it on the bridge; the host's listener
// sees no connection.
func TestTunnelUnreachableFromOtherContainers(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	first := lease(t, p, driver.Options{Egress: driver.EgressGateway})
	taddr, ln, err := first.Sandbox().(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	serveOn(t, ln, "first's gateway", &seen)
	_, port, _ := net.SplitHostPort(taddr)
	bridge, _ := bridgeServer(t)
	bridgeIP, _, _ := net.SplitHostPort(bridge)

	second := lease(t, p, driver.Options{}) // on the bridge, open egress
	for _, a := range []string{taddr, net.JoinHostPort(bridgeIP, port)} {
		if got, ok := fetch(t, second, a); ok || strings.Contains(got, "first's gateway") {
			t.Errorf("a second container reached %s: %q", a, got)
		}
	}
	if got, ok := fetch(t, first, taddr); !ok || got != "first's gateway" {
		t.Errorf("the first container through its own tunnel: %q, %v", got, ok)
	}
	if seen.Load() != 1 {
		t.Errorf("the host's listener saw %d requests, want only the first container's", seen.Load())
	}
}

// TestTunnelVanished: a container removed behind outpost's back ends its
// tunnel with an error wrapping driver.ErrVanished.
func TestTunnelVanished(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	l, err := sandbox.Acquire(t.Context(), dockertest.Provider(t, dockertest.Busybox), driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background()) // vanished: its error is the copy back's, expected
	_, ln, err := l.Sandbox().(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	cid := l.Sandbox().(*docker.Sandbox).ContainerID()
	if err := dockertest.Client(t).ContainerRemove(t.Context(), cid, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; !errors.Is(err, driver.ErrVanished) {
		t.Errorf("Accept once the container is gone: %v, want driver.ErrVanished", err)
	}
}

// TestEscape runs the escape suite on the Debian image (which has node,
// for the fetch row): every row is blocked.
func TestEscape(t *testing.T) {
	dockertest.Require(t, dockertest.Debian)
	bridge := dockertest.BridgeGateway(t)
	rep := sandboxtest.RunEscapeTests(t, sandboxtest.EscapeHarness{
		NewProvider: func(t *testing.T) driver.Provider { return dockertest.Provider(t, dockertest.Debian) },
		Options:     func(t *testing.T) driver.Options { return driver.Options{Workdir: workdir(t)} },
		HostIP:      bridge,
	})
	if rep.Unenforced {
		t.Error("docker leases reported unenforced")
	}
}
