package docker_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// procConn is a connection made inside a sandbox by the in-sandbox
// binary's dial mode, seen from the host through that process's stdin and
// stdout.
type procConn struct {
	p driver.Process
}

func (c procConn) Read(b []byte) (int, error)  { return c.p.Stdout().Read(b) }
func (c procConn) Write(b []byte) (int, error) { return c.p.Stdin().Write(b) }
func (c procConn) Close() error {
	_ = c.p.Stdin().Close()
	_ = c.p.Signal(driver.Kill)
	return c.p.Close()
}
func (procConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (procConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (procConn) SetDeadline(time.Time) error      { return nil }
func (procConn) SetReadDeadline(time.Time) error  { return nil }
func (procConn) SetWriteDeadline(time.Time) error { return nil }
func (procConn) String() string                   { return "dial" }

// BenchmarkTunnelRequest: one small HTTP request and its answer, over one
// kept-alive connection, to the same handler. direct: a client on the
// host's loopback. tunnel: a client inside a docker sandbox with network
// none, through its tunnel (the connection is made in the sandbox by the
// in-sandbox binary's dial mode, whose own exec stream carries the
// client's bytes from the host: the figure is an upper bound of the
// tunnel's cost, the client's exec stream counted on top).
func BenchmarkTunnelRequest(b *testing.B) {
	dockertest.Require(b, dockertest.Busybox)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	run := func(b *testing.B, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
		c := &http.Client{Transport: &http.Transport{DialContext: dial, MaxConnsPerHost: 1, DisableCompression: true}}
		defer c.CloseIdleConnections()
		b.ResetTimer()
		for b.Loop() {
			resp, err := c.Get("http://gateway/")
			if err != nil {
				b.Fatal(err)
			}
			if body, _ := io.ReadAll(resp.Body); string(body) != "ok" {
				b.Fatalf("body %q", body)
			}
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		run(b, func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", ln.Addr().String())
		})
	})
	b.Run("exec-echo", func(b *testing.B) {
		sb := benchSandbox(b)
		pr, err := sb.Start(context.Background(), driver.ExecRequest{Path: "cat", Env: sb.Environment().Defaults, Stdin: true})
		if err != nil {
			b.Fatal(err)
		}
		c := procConn{p: pr}
		defer c.Close()
		// A request and an answer of the size of the HTTP ones above.
		req, buf := make([]byte, 200), make([]byte, 200)
		b.ResetTimer()
		for b.Loop() {
			if _, err := c.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tunnel", func(b *testing.B) {
		sb := benchSandbox(b)
		addr, ln, err := sb.(driver.Tunneler).Tunnel(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		env := sb.Environment().Defaults
		run(b, func(ctx context.Context, _, _ string) (net.Conn, error) {
			pr, err := sb.Start(ctx, driver.ExecRequest{Path: sandboxtest.TunnelBinary, Args: []string{"sandbox-shim", "dial", addr}, Env: env, Stdin: true})
			if err != nil {
				return nil, err
			}
			go func() { _, _ = io.Copy(io.Discard, pr.Stderr()) }()
			return procConn{p: pr}, nil
		})
	})
}

// benchSandbox opens a docker sandbox with network none for b.
func benchSandbox(b *testing.B) driver.Sandbox {
	b.Helper()
	p := dockertest.Provider(b, dockertest.Busybox)
	sb, err := p.Open(context.Background(), driver.Options{Workdir: b.TempDir(), Egress: driver.EgressGateway})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb
}
