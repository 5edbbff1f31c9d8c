// Package sshtest is test scaffolding for the ssh provider and the
// integration tests: it starts a real OpenSSH server (the image
// outpost/sshd:test, or outpost/sshd-node:test with Node.js 20, built
// locally by scripts/build-images.sh) with
// testcontainers-go, each start with a freshly generated host key and user
// key and a known_hosts file written for it; it builds the static outpost
// binary the provider copies to the host (once per test process), and
// makes providers that talk to the server. A missing Docker Engine or
// image fails the test under CI=true and skips it loudly otherwise
// (internal/testenv).
//
// Ryuk, testcontainers' reaper, cannot be pulled here: it is disabled
// (TESTCONTAINERS_RYUK_DISABLED=true), and containers are removed by
// Terminate (t.Cleanup, or Main for the shared server) and carry the
// label Label for anything that escaped.
package sshtest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/outposthq/outpost/internal/testenv"
	sshp "github.com/outposthq/outpost/providers/ssh"
)

// Image is the sshd image scripts/build-images.sh builds.
const Image = "outpost/sshd:test"

// NodeImage is Image with Node.js 20 or later ahead of Debian's node 18
// on the login PATH (scripts/build-images.sh sshd-node): the host of the
// CLIs that need it (Gemini CLI, Qwen Code).
const NodeImage = "outpost/sshd-node:test"

// User is the image's login user.
const User = "agent"

// Label marks every container sshtest starts (value: the test process's
// pid).
const Label = "com.github.outposthq.outpost.test.sshd"

func init() {
	// Ryuk's image cannot be pulled: clean up by Terminate and labels.
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	// A local engine publishes ports on this machine's loopback;
	// testcontainers would guess the default gateway when it believes it
	// runs in a container.
	if h := os.Getenv("DOCKER_HOST"); os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && (h == "" || strings.HasPrefix(h, "unix://")) {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
}

// Server is one running sshd container.
type Server struct {
	// Host and Port are where the test process reaches sshd.
	Host string
	Port int
	// IP is the container's address on the Docker bridge (what other
	// containers and the server itself use).
	IP string
	// Gateway is the bridge's gateway: the test host as the container
	// sees it.
	Gateway string
	// Identity is the user key's private key file; KnownHosts a
	// known_hosts file holding the server's host key.
	Identity, KnownHosts string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// Dir holds the key files.
	Dir string

	c testcontainers.Container
}

// logTail is the last n lines of the container's log.
func (s *Server) logTail(n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 8<<20))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Addr is user@host:port.
func (s *Server) Addr() string {
	return User + "@" + net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// Require fails or skips the test when no Docker Engine answers or the
// image is missing.
func Require(tb testing.TB) { RequireImage(tb, Image) }

// RequireImage is Require for another sshd image (NodeImage).
func RequireImage(tb testing.TB, image string) {
	tb.Helper()
	testenv.RequireDocker(tb)
	testenv.RequireImage(tb, image)
}

func pemKey(priv ed25519.PrivateKey) ([]byte, error) {
	b, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(b), nil
}

// Start starts a server of Image with fresh keys. The caller terminates
// it.
func Start(ctx context.Context) (*Server, error) { return StartImage(ctx, Image) }

// StartImage is Start with another sshd image (NodeImage).
func StartImage(ctx context.Context, image string) (*Server, error) {
	dir, err := os.MkdirTemp("", "outpost-sshtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir}
	fail := func(err error) (*Server, error) {
		s.Terminate()
		return nil, err
	}
	hostPub, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	userPub, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostPEM, err := pemKey(hostPriv)
	if err != nil {
		return fail(err)
	}
	userPEM, err := pemKey(userPriv)
	if err != nil {
		return fail(err)
	}
	s.Identity = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(s.Identity, userPEM, 0o600); err != nil {
		return fail(err)
	}
	uk, _ := ssh.NewPublicKey(userPub)
	s.HostKey, _ = ssh.NewPublicKey(hostPub)
	req := testcontainers.ContainerRequest{
		Image:        image,
		ExposedPorts: []string{"22/tcp"},
		Env: map[string]string{
			"OUTPOST_SSHD_HOST_KEY":       base64.StdEncoding.EncodeToString(hostPEM),
			"OUTPOST_SSHD_AUTHORIZED_KEY": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(uk))),
		},
		Labels:     map[string]string{Label: strconv.Itoa(os.Getpid())},
		WaitingFor: wait.ForLog("Server listening on").WithStartupTimeout(60 * time.Second),
		// bubblewrap in the container (the provider's isolation) makes
		// user, PID and network namespaces and mounts /proc: Docker's
		// seccomp profile refuses the first, its masked /proc the last.
		HostConfigModifier: func(hc *container.HostConfig) {
			// (The API's form of --security-opt systempaths=unconfined is
			// empty lists of masked and read-only paths.)
			hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined", "apparmor=unconfined")
			hc.MaskedPaths, hc.ReadonlyPaths = []string{}, []string{}
		},
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	s.c = c
	if err != nil {
		return fail(fmt.Errorf("sshtest: starting %s: %w", image, err))
	}
	if err := s.locate(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// locate reads the server's addresses and writes its known_hosts.
func (s *Server) locate(ctx context.Context) error {
	host, err := s.c.Host(ctx)
	if err != nil {
		return err
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	mp, err := s.c.MappedPort(ctx, "22/tcp")
	if err != nil {
		return err
	}
	s.Host, s.Port = host, int(mp.Num())
	ins, err := s.c.Inspect(ctx)
	if err != nil {
		return err
	}
	for _, n := range ins.NetworkSettings.Networks {
		if n.IPAddress.IsValid() {
			s.IP, s.Gateway = n.IPAddress.String(), n.Gateway.String()
			break
		}
	}
	s.KnownHosts = filepath.Join(s.Dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))}, s.HostKey)
	return os.WriteFile(s.KnownHosts, []byte(line+"\n"), 0o600)
}

// Terminate removes the container and the key files.
func (s *Server) Terminate() {
	if s.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.c.Terminate(ctx)
	}
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

// Stop stops the container (sshd and every process of the "host" die),
// as a host going away would.
func (s *Server) Stop(ctx context.Context) error {
	d := time.Duration(0)
	return s.c.Stop(ctx, &d)
}

// Exec runs a command in the container as root and returns its exit
// status and combined output.
func (s *Server) Exec(ctx context.Context, cmd ...string) (int, string, error) {
	code, r, err := s.c.Exec(ctx, cmd)
	if err != nil {
		return code, "", err
	}
	var b bytes.Buffer
	_, _ = io.Copy(&b, r)
	// The stream is multiplexed: drop the 8-byte frame headers.
	return code, demux(b.Bytes()), nil
}

func demux(b []byte) string {
	var out bytes.Buffer
	for len(b) >= 8 && (b[0] == 1 || b[0] == 2) && b[1] == 0 && b[2] == 0 && b[3] == 0 {
		n := int(b[4])<<24 | int(b[5])<<16 | int(b[6])<<8 | int(b[7])
		if 8+n > len(b) {
			break
		}
		out.Write(b[8 : 8+n])
		b = b[8+n:]
	}
	out.Write(b)
	return out.String()
}

// MustExec is Exec failing the test on error.
func (s *Server) MustExec(tb testing.TB, cmd ...string) string {
	tb.Helper()
	code, out, err := s.Exec(context.Background(), cmd...)
	if err != nil {
		tb.Fatalf("docker exec %v: %v", cmd, err)
	}
	if code != 0 {
		tb.Fatalf("docker exec %v: exit %d: %s", cmd, code, out)
	}
	return out
}

// New starts a server for one test, terminated when it ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	Require(tb)
	s, err := Start(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Terminate)
	return s
}

// sharedServer is the test process's shared server of one image.
type sharedServer struct {
	once sync.Once
	s    *Server
	err  error
}

// shared are the shared servers, by image (the map is never written).
var shared = map[string]*sharedServer{Image: {}, NodeImage: {}}

// Shared returns the test process's shared server, started on first use
// and terminated by Main: one container per test package.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return SharedImage(tb, Image)
}

// SharedImage is Shared for another sshd image (NodeImage): one shared
// container per image.
func SharedImage(tb testing.TB, image string) *Server {
	tb.Helper()
	sh, ok := shared[image]
	if !ok {
		tb.Fatalf("sshtest: no shared server of %s (images: %s, %s)", image, Image, NodeImage)
	}
	RequireImage(tb, image)
	sh.once.Do(func() { sh.s, sh.err = StartImage(context.Background(), image) })
	if sh.err != nil {
		tb.Fatal(sh.err)
	}
	return sh.s
}

// Main runs the tests, then terminates the shared servers and removes the
// built binary. TestMain functions call it after their own setup.
func Main(m *testing.M) { testenv.Main(m, "sshd containers", Cleanup, Leftovers) }

// Leftovers removes the sshd containers this process started and did not
// terminate, and lists them ("" when there were none).
func Leftovers() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+Label+"="+strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		return ""
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return ""
	}
	_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
	return strings.Join(ids, "\n")
}

// Cleanup terminates the shared servers and removes the built binary:
// TestMain functions that do not use Main call it after m.Run.
func Cleanup() {
	cleanup(0)
}

// CleanupAfter is Cleanup at the end of a run that exited with code:
// after a failure it first prints the end of each shared sshd's log
// (sshd -e: why it dropped a connection, if it did) to standard error,
// which a CI run's lost connection otherwise leaves unexplained.
func CleanupAfter(code int) { cleanup(code) }

func cleanup(code int) {
	if code != 0 {
		for image, sh := range shared {
			if sh.s != nil && sh.s.c != nil {
				fmt.Fprintf(os.Stderr, "== the shared sshd of %s: the end of its log\n%s\n", image, sh.s.logTail(60))
			}
		}
	}
	for _, sh := range shared {
		if sh.s != nil {
			sh.s.Terminate()
		}
	}
	testenv.RemoveBuilds()
}

// Options are the provider options for s: its address, key and
// known_hosts, no ssh config, the test's static binary.
func (s *Server) Options(tb testing.TB) *sshp.Options {
	return &sshp.Options{
		Host:       s.Addr(),
		Identity:   s.Identity,
		KnownHosts: s.KnownHosts,
		Config:     "none",
		Binary:     Binary(tb),
	}
}

// Provider returns a provider for s with mod applied to its options,
// closed when the test ends.
func Provider(tb testing.TB, s *Server, mod ...func(*sshp.Options)) *sshp.Provider {
	tb.Helper()
	return testenv.Provider(tb, s.Options(tb), mod, sshp.New)
}

// Patient gives a provider a keepalive of a minute: its connection is
// closed only after about three minutes without a byte from the host.
// For tests of what runs over SSH (the real CLIs of integration/presets),
// not of the keepalive: at the suite's peak load (average 25–30 on two
// cores) the shared host sent nothing for over 45 s while a real CLI
// turn ran, three times in five fresh-clone runs, and the default 15 s
// keepalive closed a connection that came back. The keepalive itself is
// tested in providers/ssh (TestKeepAliveClosesFrozenHost).
func Patient(o *sshp.Options) { o.KeepAlive = time.Minute }

// Binary returns the in-sandbox binary (testenv.SandboxBinary), built
// once per test process.
func Binary(tb testing.TB) string {
	tb.Helper()
	return testenv.SandboxBinary(tb)
}

// Relay listens on the server's Gateway (this machine's address on the
// Docker bridge, the only one of its addresses the container reaches)
// and forwards each connection to target, a loopback address of the test
// (a fake model API, which listens on loopback only). It returns the
// relay's address as the container sees it; the relay closes when the
// test ends.
func (s *Server) Relay(tb testing.TB, target string) string {
	tb.Helper()
	if s.Gateway == "" {
		tb.Fatal("sshtest: the container has no bridge gateway")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(s.Gateway, "0"))
	if err != nil {
		tb.Fatalf("sshtest: relay: %v", err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}
