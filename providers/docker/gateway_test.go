package docker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// statusOf sends a GET of path to addr from inside l (of the Debian
// image: bash's /dev/tcp, which keeps its side open until the answer, as
// HTTP clients do) with the header line header ("" for none), and
// returns the response's status line.
func statusOf(t *testing.T, l *sandbox.Lease, addr, path, header string) string {
	t.Helper()
	if header != "" {
		header += `\r\n`
	}
	host, port, _ := strings.Cut(addr, ":")
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf 'GET %s HTTP/1.0\r\n%s\r\n' >&3 && head -n 1 <&3`, host, port, path, header)
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/bash", Args: []string{"-c", script}, Env: l.Environment().Fixed}, 1<<20)
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestGatewayTokenThroughTunnel: the credential gateway served on a
// network-none container's tunnel. Its model route answers a request
// from inside the container that carries the grant's token, and forwards
// it; no token, a wrong token, another gateway's token and the token
// once revoked get 401, and the upstream sees none of them.
func TestGatewayTokenThroughTunnel(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Debian)
	l := lease(t, dockertest.Provider(t, dockertest.Debian), driver.Options{Egress: driver.EgressGateway})
	up, seen := serveCounting(t, "127.0.0.1:0", "from the upstream")
	gw := gateway.New(gateway.Options{})
	t.Cleanup(func() { gw.Close() })
	other := gateway.New(gateway.Options{})
	t.Cleanup(func() { other.Close() })
	route := gateway.Route{Upstream: "http://" + up, Secret: "sk-real-upstream-key", Credential: gateway.XAPIKey}
	gr, err := gw.Grant(gateway.GrantOptions{Routes: []gateway.Route{route}})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Grant(gateway.GrantOptions{Routes: []gateway.Route{route}})
	if err != nil {
		t.Fatal(err)
	}
	addr, ln, err := l.Sandbox().(driver.Tunneler).Tunnel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ln) //nolint:errcheck // ends with the gateway
	path := gateway.PathPrefix + "0/v1/messages"

	if got := statusOf(t, l, addr, path, "x-api-key: "+gr.Token()); got != "HTTP/1.0 200 OK" {
		t.Fatalf("with the grant's token: %q, want 200", got)
	}
	if seen.Load() != 1 {
		t.Fatalf("the upstream saw %d requests, want 1", seen.Load())
	}
	wrong := "outpost-" + strings.Repeat("0", 64)
	for _, tt := range []struct{ name, header string }{
		{"no token", ""},
		{"wrong token", "x-api-key: " + wrong},
		{"wrong bearer", "Authorization: Bearer " + wrong},
		{"another gateway's token", "x-api-key: " + foreign.Token()},
	} {
		if got := statusOf(t, l, addr, path, tt.header); !strings.HasPrefix(got, "HTTP/1.0 401 ") {
			t.Errorf("%s: %q, want 401", tt.name, got)
		}
	}
	gr.Revoke()
	if got := statusOf(t, l, addr, path, "x-api-key: "+gr.Token()); !strings.HasPrefix(got, "HTTP/1.0 401 ") {
		t.Errorf("the revoked token: %q, want 401", got)
	}
	if seen.Load() != 1 {
		t.Errorf("the upstream saw %d requests, want only the first", seen.Load())
	}
}
